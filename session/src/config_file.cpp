// settings.json, models.json, auth.json: bounded reads, strict parsing, atomic writes, locks.

#include <coagent/runtime/json_input.hpp>
#include <coagent/session/config_file.hpp>
#include <coagent/session/private_files.hpp>

#include <boost/json/serialize.hpp>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coagent::config_file {

namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

struct fd_guard {
    int fd = -1;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
    int release() noexcept { return std::exchange(fd, -1); }
};

std::string errno_text(int err) {
    return std::generic_category().message(err);
}

// "cannot open it" when open() fails (permissions, a file where a directory should be),
// "cannot read it" when read() does (a directory where the file should be)
[[noreturn]] void throw_read(const std::string& label, int err, const char* verb = "read") {
    const std::string text = errno_text(err);
    throw settings_error(label, "", "a readable file", text,
                         label + ": cannot " + verb + " it: " + text);
}

[[noreturn]] void throw_write(const std::string& label, const std::string& action, int err) {
    const std::string text = errno_text(err);
    throw settings_error(label, "", "a writable file", text,
                         label + ": cannot " + action + ": " + text);
}

std::atomic<unsigned> temp_counter{0};

// ---- JSON text: doubles in their shortest round-trip form ("2.5", not Boost's "2.5E0") --------

void append_double(std::string& out, double d) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
    if (ec != std::errc{} || !std::isfinite(d)) {
        out += json::serialize(json::value(d));
        return;
    }
    std::string_view s(buf, static_cast<std::size_t>(end - buf));
    out += s;
    if (s.find_first_of(".eE") == std::string_view::npos) out += ".0";
}

void append_json(std::string& out, const json::value& v, int indent, int depth) {
    const auto newline = [&](int d) {
        out += '\n';
        out.append(static_cast<std::size_t>(indent * d), ' ');
    };
    switch (v.kind()) {
        case json::kind::object: {
            const auto& o = v.get_object();
            if (o.empty()) {
                out += "{}";
                return;
            }
            out += '{';
            bool first = true;
            for (const auto& kv : o) {
                if (!first) out += ',';
                first = false;
                if (indent > 0) newline(depth + 1);
                out += json::serialize(kv.key());
                out += indent > 0 ? ": " : ":";
                append_json(out, kv.value(), indent, depth + 1);
            }
            if (indent > 0) newline(depth);
            out += '}';
            return;
        }
        case json::kind::array: {
            const auto& a = v.get_array();
            if (a.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            bool first = true;
            for (const auto& x : a) {
                if (!first) out += ',';
                first = false;
                if (indent > 0) newline(depth + 1);
                append_json(out, x, indent, depth + 1);
            }
            if (indent > 0) newline(depth);
            out += ']';
            return;
        }
        case json::kind::double_:
            append_double(out, v.get_double());
            return;
        default:
            out += json::serialize(v);
            return;
    }
}

}  // namespace

std::optional<std::string> read(const fs::path& p, const std::string& label, std::size_t max) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below
    fd_guard f{::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
    if (f.fd < 0) {
        if (errno == ENOENT) return std::nullopt;
        throw_read(label, errno, "open");
    }
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) throw_read(label, errno);
    if (S_ISDIR(st.st_mode)) throw_read(label, EISDIR);
    if (!S_ISREG(st.st_mode)) {
        // /dev/stdin, a FIFO, a device: never configuration (RPC mode would read its commands)
        const char* kind = S_ISFIFO(st.st_mode)   ? "a pipe"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "not a file";
        throw settings_error(label, "", "a regular file", kind,
                             label + ": not a regular file (" + kind +
                                 "); coagent reads configuration only from regular files");
    }
    const auto too_large = [&] {
        const std::string limit =
            std::to_string(max) + " bytes (" + std::to_string(max / (1024 * 1024)) + " MiB)";
        return settings_error(label, "", "a file of at most " + limit, "a larger file",
                              label + ": file larger than the limit of " + limit);
    };
    std::string text;
    char buf[64 * 1024];
    for (;;) {
        const ssize_t n = ::read(f.fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_read(label, errno);
        }
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > max) throw too_large();
    }
    return text;
}

bool blank(std::string_view text) noexcept {
    return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

json::object parse_object(std::string_view text, const std::string& label,
                          std::string_view expected_top) {
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte order mark
    if (blank(text))
        throw settings_error(label, "", "a JSON object", "an empty file",
                             label + ": empty file, expected a JSON object");
    auto parsed = parse_json_strict(text);
    if (const auto& e = parsed.error) {
        if (e->non_finite)
            throw settings_error(label, e->path,
                                 "a number within the double range (about ±1.8e308)",
                                 "a number out of range");
        settings_error err(label, "", "valid JSON", e->message,
                           label + ":" + std::to_string(e->line) + ":" + std::to_string(e->column) +
                               ": invalid JSON: " + e->message);
        err.line = e->line;
        err.column = e->column;
        throw err;
    }
    if (!parsed.value.is_object())
        throw settings_error(label, "", std::string(expected_top), compact(parsed.value));
    return std::move(parsed.value.get_object());
}

void write_atomically(const fs::path& path, const std::string& content, const std::string& label,
                      std::optional<unsigned> mode) {
    const fs::path target = resolve_symlinks(path);  // write through a symlink, keep it
    fs::path dir = target.parent_path();
    if (dir.empty()) dir = ".";
    fs::path failed;
    if (auto ec = create_private_directories(dir, &failed))  // 0700 when coagent creates it
        throw settings_error(
            label, "", "a writable directory", ec.message(),
            label + ": cannot create directory " + failed.string() + ": " + ec.message());

    struct stat old {};
    const bool existed = ::stat(target.c_str(), &old) == 0;

    fs::path temp;
    fd_guard f;
    for (int attempt = 0; f.fd < 0; ++attempt) {
        // built with append: g++ 12 -O3 warns falsely (-Wrestrict) on "." + std::string
        std::string name(1, '.');
        name.append(target.filename().string())
            .append(".tmp.")
            .append(std::to_string(::getpid()))
            .append(".")
            .append(std::to_string(temp_counter.fetch_add(1)));
        temp = dir / name;
        f.fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode ? *mode : 0666);
        if (f.fd < 0 && (errno != EEXIST || attempt >= 100))
            throw_write(label, "create " + temp.string(), errno);
    }
    struct temp_guard {
        const fs::path& p;
        bool armed = true;
        ~temp_guard() {
            if (armed) ::unlink(p.c_str());
        }
    } remove_temp{temp};

    if (mode) {
        if (::fchmod(f.fd, *mode) != 0)
            throw_write(label, "set mode", errno);  // regardless of the umask
    } else if (existed && ::fchmod(f.fd, old.st_mode & 07777) != 0) {
        throw_write(label, "set mode", errno);
    }
    std::string_view rest = content;
    while (!rest.empty()) {
        const ssize_t n = ::write(f.fd, rest.data(), rest.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_write(label, "write " + temp.string(), errno);
        }
        rest.remove_prefix(static_cast<std::size_t>(n));
    }
    if (::fsync(f.fd) != 0) throw_write(label, "fsync " + temp.string(), errno);
    if (::close(f.release()) != 0) throw_write(label, "close " + temp.string(), errno);
    if (::rename(temp.c_str(), target.c_str()) != 0) throw_write(label, "replace it", errno);
    remove_temp.armed = false;

    fd_guard d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (d.fd < 0) throw_write(label, "open directory " + dir.string(), errno);
    if (::fsync(d.fd) != 0 && errno != EINVAL) throw_write(label, "fsync directory", errno);
}

fs::path resolve_symlinks(const fs::path& p) {
    fs::path cur = p;
    for (int hops = 0; hops < 40; ++hops) {  // the kernel's limit (ELOOP)
        std::error_code ec;
        if (!fs::is_symlink(cur, ec)) return cur;
        fs::path t = fs::read_symlink(cur, ec);
        if (ec) return cur;
        cur = t.is_absolute() ? std::move(t) : cur.parent_path() / t;
    }
    return cur;
}

lock::lock(const fs::path& file) {
    // next to the file written (write_atomically's target), not next to a symlink to it
    const fs::path path(resolve_symlinks(file).string() + ".lock");
    (void)create_private_directories(path.parent_path());  // a failure shows in open()
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ >= 0) {
        if (::fchmod(fd_, 0600) != 0) {  // created here: 0600 whatever the umask
            error = path.string() + ": " + errno_text(errno);
            return;
        }
    } else if (errno == EEXIST) {
        fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    }
    if (fd_ < 0) {
        error = path.string() + ": " + errno_text(errno);
        return;
    }
    while (::flock(fd_, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        error = path.string() + ": " + errno_text(errno);
        return;
    }
}

lock::~lock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string pretty(const json::value& v) {
    std::string out;
    append_json(out, v, 2, 0);
    out += '\n';
    return out;
}

std::string compact(const json::value& v) {
    std::string out;
    append_json(out, v, 0, 0);
    return cut_utf8(std::move(out), 80);
}

}  // namespace coagent::config_file
