#pragma once
// Session history: every message of a session, errors included, in the order it was added,
// as JSONL (header line, then one entry per line with id/parentId) when a file is used.
// An entry is written and flushed before its event is published.

#include <coagent/runtime/limit.hpp>
#include <coagent/runtime/message.hpp>

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <sys/types.h>

namespace coagent {

/// Bounds on a session file: 64 MiB a line (one entry: the largest is a provider's reply, at
/// most 16 MiB, about twice that once serialised, or an RPC prompt of at most 16 MiB). A file
/// has no limit of its own: it is read line by line, one line buffered at a time. An entry
/// that would be longer is written with its content cut (fit_message), so a file coagent
/// writes always loads.
struct session_file_limits {
    std::size_t max_line_bytes = std::size_t{64} * 1024 * 1024;
};

/// The most bytes of a session file's header line that `--continue`'s scan reads: 64 KiB (a
/// header holds a type, a version, an id, a timestamp and the cwd, a path of at most 4096
/// bytes).
inline constexpr std::size_t session_header_max_bytes = std::size_t{64} * 1024;

/// The first line of `in` (without its LF), reading at most `max_bytes` + 1 bytes of it; nullopt
/// when it is longer than `max_bytes` or `in` is empty.
std::optional<std::string> read_first_line(std::istream& in, std::size_t max_bytes);

/// "…[N bytes not stored]": what replaces the end of a text cut to fit a session-file line.
std::string not_stored_marker(std::size_t bytes);

/// `m` with its content cut so that it serialises to at most `max_bytes`: the largest text
/// blocks lose their end (on a code-point boundary) and end with not_stored_marker(N), the
/// largest tool-call arguments become {"…": marker}; a message that still does not fit keeps
/// one text block, the marker. `m` itself as it is when it fits.
message fit_message(const message& m, std::size_t max_bytes);

struct history_entry {
    std::string id;         // 8 hex digits
    std::string parent_id;  // empty for the root
    std::string type;       // "message", "compaction", "model_change", ... (others kept as raw)
    message_ptr msg;        // for "message"
    json::object raw;       // the entry as read, or its own fields as written (file mode; a
                            // message entry written by this process: without the message)
};

class session_history {
  public:
    /// In memory only (--no-session).
    session_history();
    ~session_history();
    session_history(session_history&&) noexcept;
    session_history& operator=(session_history&&) noexcept;

    /// A new session file in `dir` (created if missing), named <timestamp>_<id>.jsonl.
    /// The header is written with the first entry. The file is created 0600 and held under an
    /// exclusive flock for the life of the history (docs/sessions.md "One writer"). Throws
    /// std::system_error naming the path.
    static session_history create_file(const std::filesystem::path& dir, std::string cwd);

    struct loaded;
    /// Loads a session file. A torn or unparsable last line is skipped with a warning (a
    /// crash while writing); so is a line longer than limits.max_line_bytes or holding a
    /// number beyond the double range; unknown entry types are kept with a warning. An empty
    /// (or blank) file is an empty session (killed before its first entry): its id is taken
    /// from the file name (<timestamp>_<id>.jsonl) and the header is written with the first
    /// entry. A file that is not a session file (no valid header, or an empty "id"), that
    /// cannot be read (it is read line by line, whatever its size) throws std::runtime_error
    /// naming the file; so does a file another session holds (`<file>: in use by process
    /// <pid>`), checked before the file is read. Later appends go to the same file, under the
    /// same exclusive flock, released when the history is destroyed.
    static loaded load(const std::filesystem::path& file, const session_file_limits& limits = {});

    const std::string& session_id() const noexcept { return id_; }
    const std::optional<std::filesystem::path>& file() const noexcept {
        static const std::optional<std::filesystem::path> none;
        return file_ ? file_->path : none;
    }
    const std::vector<history_entry>& entries() const noexcept { return entries_; }

    /// The longest line append_*() writes (load() takes it from its limits): a longer entry is
    /// written with its content cut (fit_message). Default session_file_limits{}.max_line_bytes.
    void set_max_line_bytes(std::size_t n) noexcept { max_line_bytes_ = n; }

    /// Appends a message entry (parent = the current leaf); in file mode writes and flushes
    /// the line before returning. An I/O failure is returned, the entry is kept in memory.
    std::error_code append_message(message_ptr m);
    /// Appends any other entry type (object without id/parentId/timestamp: they are added).
    std::error_code append_entry(std::string type, json::object fields);

    /// The messages of the history, root to leaf, errors included.
    std::vector<message_ptr> messages() const;
    /// The runtime context the history stands for, root to leaf, with compaction applied: after
    /// a compaction entry, its summary message followed by the messages from firstKeptEntryId.
    /// Failed replies are included (they are filtered when a request is built).
    std::vector<message_ptr> context() const;

  private:
    std::error_code write_line(const json::object& o);
    std::error_code write_text_line(std::string line);  // appends the newline
    std::error_code append(std::string type, json::object fields, message_ptr m);

    // file mode only, out of line: an in-memory history stays small
    struct file_state {
        std::string cwd;
        std::optional<std::filesystem::path> path;
        bool header_written = false;
    };
    file_state& file_mode();

    std::string id_;
    std::unique_ptr<file_state> file_;
    int fd_ = -1;  // file mode: the session file, O_APPEND, under an exclusive flock
    std::vector<history_entry> entries_;
    std::size_t max_line_bytes_ = session_file_limits{}.max_line_bytes;
};

struct session_history::loaded {
    session_history history;
    std::vector<std::string> warnings;
};

/// A park (retry.longWait "park") the session file left open: its last `retry_park` entry with
/// no `retry_park_end` after it (docs/sessions.md).
struct open_park {
    std::int64_t until = 0;  ///< epoch ms
    int attempt = 1;
    limit_kind limit = limit_kind::none;
    std::string error_message;
    std::string provider;  ///< the account whose limit it waits for
};
/// The open park of `entries`, if any; an entry with a malformed `until` opens none.
std::optional<open_park> find_open_park(const std::vector<history_entry>& entries);

/// The process holding a flock on the file (`dev`, `ino`), read from the text of /proc/locks
/// ("<n>: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF", major and minor in
/// hex; waiters, "->", are skipped); nullopt when no line matches.
std::optional<long> flock_holder(std::string_view proc_locks, dev_t dev, ino_t ino);

/// A fresh random id of `hex_digits` hex digits, from the OS's random source (getrandom(2)).
/// Throws std::system_error when the OS gives no random bytes (no weaker fallback).
std::string random_hex_id(std::size_t hex_digits);

}  // namespace coagent
