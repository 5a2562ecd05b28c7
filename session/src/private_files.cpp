// Private directories and files (0700 / 0600 whatever the umask) and the readable-directory
// warning.

#include <coagent/session/private_files.hpp>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include <sys/stat.h>

namespace coagent {

namespace fs = std::filesystem;

std::error_code create_private_directories(const fs::path& dir, fs::path* failed) {
    const auto fail = [&](int err, const fs::path& p) {
        if (failed) *failed = p;
        return std::error_code(err, std::generic_category());
    };
    fs::path norm = dir.lexically_normal();
    if (!norm.empty() && !norm.has_filename()) norm = norm.parent_path();  // "a/b/" → "a/b"
    if (norm.empty()) return {};
    std::vector<fs::path> missing;  // deepest first
    for (fs::path p = norm; !p.empty(); p = p.parent_path()) {
        struct stat st {};
        if (::stat(p.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode)) return fail(ENOTDIR, p);
            break;
        }
        if (errno != ENOENT) return fail(errno, p);
        missing.push_back(p);
        if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        if (::mkdir(it->c_str(), 0700) != 0) {
            if (errno == EEXIST) continue;  // another process made it: not ours to chmod
            return fail(errno, *it);
        }
        if (::chmod(it->c_str(), 0700) != 0) return fail(errno, *it);  // the umask may have cut it
    }
    return {};
}

std::optional<std::string> readable_session_dir_warning(const fs::path& dir) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
    if ((st.st_mode & (S_IRGRP | S_IROTH)) == 0) return std::nullopt;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return dir.string() + ": the session directory can be read by group or others (mode " + mode +
           "); `chmod 700 " + dir.string() + "` keeps conversations private";
}

std::optional<std::string> readable_session_dir_warning_once(const fs::path& dir) {
    static std::mutex m;
    static std::set<std::string> warned;
    auto w = readable_session_dir_warning(dir);
    if (!w) return w;
    std::lock_guard lock(m);
    if (!warned.insert(dir.lexically_normal().string()).second) return std::nullopt;
    return w;
}

}  // namespace coagent
