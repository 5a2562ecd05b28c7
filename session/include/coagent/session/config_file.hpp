#pragma once
// The JSON configuration files coagent reads and rewrites (settings.json, models.json,
// auth.json): bounded reading, strict parsing with errors that name the file, the line or the
// key, atomic replacement, and the exclusive lock of a read-modify-write. Errors are
// settings_error (settings_store.hpp).

#include <coagent/session/settings_store.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace coagent::config_file {

/// The largest configuration file read: 4 MiB. Hand-written files are kilobytes (auth.json with
/// a hundred keys is about 10 KiB); the bound keeps a stray huge file from taking the memory
/// of its text and its JSON tree.
inline constexpr std::size_t max_bytes = std::size_t{4} * 1024 * 1024;

/// The file's bytes; nullopt if it does not exist. Throws settings_error naming the file when it
/// is not a regular file (`<file>: not a regular file (a pipe); coagent reads configuration only
/// from regular files`: /dev/stdin, a FIFO, a device; a symlink to a regular file is fine), when
/// it cannot be read (`<file>: cannot read it: Is a directory`) or is larger than `max`
/// (`<file>: file larger than the limit of 4194304 bytes (4 MiB)`); no more than `max` + 64 KiB
/// is ever held.
std::optional<std::string> read(const std::filesystem::path& p, const std::string& label,
                                std::size_t max = max_bytes);

/// `p` with the symlinks of its last component followed (up to 40), relative targets taken
/// from the link's directory; the target need not exist. What write_atomically writes and lock
/// locks, so a symlinked file is locked and written at the same place.
std::filesystem::path resolve_symlinks(const std::filesystem::path& p);

/// Whether `text` holds only spaces, tabs and line ends.
bool blank(std::string_view text) noexcept;

/// Parses a configuration file: a UTF-8 byte order mark is skipped; a blank text is
/// `<file>: empty file, expected a JSON object`; invalid JSON is `<file>:<line>:<column>:
/// invalid JSON: <what>` (line and column set); a number beyond the double range is `<file>: key
/// "<path>": expected a number within the double range (about ±1.8e308), found a number out of
/// range`; a top level that is not an object is `<file>: expected <expected_top>, found <json>`.
boost::json::object parse_object(std::string_view text, const std::string& label,
                                 std::string_view expected_top = "a JSON object at the top level");

/// Replaces `path` with `content`: a temporary file in the same directory, fsync, rename, fsync
/// of the directory (created 0700 if missing, create_private_directories); a symlink is written
/// through, not replaced. `mode`: the new file's permission bits; nullopt keeps those of the file
/// replaced (a new file gets 0666 less the umask). The temporary file is removed on failure. Throws
/// settings_error
/// (`<file>: cannot <action>: <errno text>`).
void write_atomically(const std::filesystem::path& path, const std::string& content,
                      const std::string& label, std::optional<unsigned> mode = std::nullopt);

/// An exclusive flock on "<file>.lock" (`file` with its symlinks resolved) for its lifetime
/// (created 0600 if missing), for a read-modify-write that concurrent coagent processes must not
/// interleave. Best effort: `error` says why the lock is not held (then the caller goes on without
/// it).
class lock {
  public:
    explicit lock(const std::filesystem::path& file);
    ~lock();
    lock(const lock&) = delete;
    lock& operator=(const lock&) = delete;

    std::string error;  // empty when held: "<file>.lock: <errno text>"

  private:
    int fd_ = -1;
};

/// Compact JSON of `v` for an error message (doubles as in pretty()), cut to 80 bytes on a
/// code-point boundary with "..." appended.
std::string compact(const boost::json::value& v);

/// `v` as indented JSON (2 spaces, a final LF), doubles in their shortest round-trip form
/// ("2.5", not "2.5E0").
std::string pretty(const boost::json::value& v);

}  // namespace coagent::config_file
