#pragma once
// Shared helpers of the libFuzzer targets in fuzz/: a private scratch directory for the
// loaders that read files, deterministic chunkings of one input (so every target can check
// that feeding bytes in pieces gives the same result as feeding them whole), and a check
// macro that aborts (libFuzzer reports an abort as a crash, with the input saved).

#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>

#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                                     \
        }                                                                                     \
    } while (0)

namespace coagent::fuzz {

/// A directory of this process for the files a target writes (on tmpfs when there is one, so
/// the loaders' fsync costs nothing); removed at exit.
inline const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path dir = [] {
        std::string base = "/dev/shm";
        std::error_code ec;
        if (!std::filesystem::is_directory(base, ec) || ::access(base.c_str(), W_OK) != 0) {
            const char* t = std::getenv("TMPDIR");
            base = t && *t ? t : "/tmp";
        }
        std::string templ = base + "/coagent-fuzz-XXXXXX";
        if (!::mkdtemp(templ.data())) {
            std::perror("mkdtemp");
            std::abort();
        }
        std::filesystem::path p(templ);
        static struct cleanup {
            std::filesystem::path p;
            ~cleanup() {
                std::error_code e;
                std::filesystem::remove_all(p, e);
            }
        } c{p};
        return p;
    }();
    return dir;
}

/// Writes `data` to `name` in the scratch directory (replacing it) and returns its path.
inline std::filesystem::path write_scratch(const std::string& name, const std::uint8_t* data,
                                           std::size_t size) {
    auto p = scratch_dir() / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    FUZZ_CHECK(out.good());
    return p;
}

/// Removes every file of the scratch directory (between runs of one input).
inline void clear_scratch() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(scratch_dir(), ec))
        std::filesystem::remove_all(e.path(), ec);
}

/// Chunk sizes that split `size` bytes: a small PRNG seeded from the bytes (no input byte is
/// consumed, so seeds stay plain files), sizes 1..max_chunk.
inline std::vector<std::size_t> chunking(std::string_view data, std::size_t max_chunk,
                                         std::uint64_t salt = 0) {
    std::uint64_t h = 1469598103934665603ull ^ salt;  // FNV-1a of the data as the seed
    for (unsigned char c : data) h = (h ^ c) * 1099511628211ull;
    std::vector<std::size_t> out;
    std::size_t left = data.size();
    while (left > 0) {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        std::size_t n = 1 + static_cast<std::size_t>(h % max_chunk);
        if (n > left) n = left;
        out.push_back(n);
        left -= n;
    }
    return out;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

/// JSON equality, except that two doubles within a few ulps are equal: Boost.JSON 1.81 parses
/// numbers imprecisely (no parse_options::numbers yet), so a double written back and read again
/// may move by an ulp. Not a coagent bug; documented in docs/reliability.md.
inline bool same_json(const boost::json::value& a, const boost::json::value& b) {
    if (a.is_double() && b.is_double()) {
        const double x = a.get_double(), y = b.get_double();
        return x == y || std::fabs(x - y) <= 1e-15 * std::max(std::fabs(x), std::fabs(y));
    }
    if (a.kind() != b.kind()) return false;
    if (a.is_array()) {
        const auto &p = a.get_array(), &q = b.get_array();
        if (p.size() != q.size()) return false;
        for (std::size_t i = 0; i < p.size(); ++i)
            if (!same_json(p[i], q[i])) return false;
        return true;
    }
    if (a.is_object()) {
        const auto &p = a.get_object(), &q = b.get_object();
        if (p.size() != q.size()) return false;
        for (const auto& kv : p) {
            const auto* other = q.if_contains(kv.key());
            if (!other || !same_json(kv.value(), *other)) return false;
        }
        return true;
    }
    return a == b;
}

}  // namespace coagent::fuzz
