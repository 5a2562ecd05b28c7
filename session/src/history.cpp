#include <coagent/runtime/json_input.hpp>
#include <coagent/session/compaction.hpp>
#include <coagent/session/history.hpp>
#include <coagent/session/private_files.hpp>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <istream>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace coagent {

namespace fs = std::filesystem;

std::string random_hex_id(std::size_t hex_digits) {
    // From the OS's random source (getrandom, urandom pool), never a seeded PRNG: no state to
    // repeat in a forked child, and every bit of an id is unpredictable.
    std::string bytes((hex_digits + 1) / 2, '\0');
    for (std::size_t got = 0; got < bytes.size();) {
        const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw std::system_error(errno, std::generic_category(),
                                    "cannot take a random id from the OS (getrandom)");
        }
        got += static_cast<std::size_t>(n);
    }
    static constexpr char digits[] = "0123456789abcdef";
    std::string s(hex_digits, '0');
    for (std::size_t i = 0; i < hex_digits; ++i) {
        const auto b = static_cast<unsigned char>(bytes[i / 2]);
        s[i] = digits[i % 2 == 0 ? b >> 4 : b & 0xf];
    }
    return s;
}

std::optional<long> flock_holder(std::string_view proc_locks, dev_t dev, ino_t ino) {
    char want[64];
    std::snprintf(want, sizeof want, "%02x:%02x:%llu", major(dev), minor(dev),
                  static_cast<unsigned long long>(ino));
    while (!proc_locks.empty()) {
        const auto nl = proc_locks.find('\n');
        const std::string_view line = proc_locks.substr(0, nl);
        proc_locks.remove_prefix(nl == std::string_view::npos ? proc_locks.size() : nl + 1);
        // "<n>: FLOCK  ADVISORY  WRITE <pid> <dev>:<ino> <start> <end>"
        std::vector<std::string_view> f;
        for (std::size_t i = 0; i < line.size();) {
            const auto b = line.find_first_not_of(' ', i);
            if (b == std::string_view::npos) break;
            const auto e = line.find(' ', b);
            f.push_back(line.substr(b, e == std::string_view::npos ? e : e - b));
            i = e == std::string_view::npos ? line.size() : e;
        }
        if (f.size() < 6 || f[1] != "FLOCK" || f[5] != want) continue;  // "->": a waiter
        long pid = 0;
        const auto [end, ec] = std::from_chars(f[4].data(), f[4].data() + f[4].size(), pid);
        if (ec == std::errc{} && end == f[4].data() + f[4].size() && pid > 0) return pid;
    }
    return std::nullopt;
}

namespace {

std::string iso_timestamp(std::int64_t ms) {
    using namespace std::chrono;
    const auto tp = sys_time<milliseconds>(milliseconds(ms));
    const auto day = floor<days>(tp);
    const year_month_day ymd(day);
    const hh_mm_ss hms(tp - day);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", int(ymd.year()),
                  unsigned(ymd.month()), unsigned(ymd.day()), int(hms.hours().count()),
                  int(hms.minutes().count()), int(hms.seconds().count()),
                  int(hms.subseconds().count()));
    return buf;
}

// Takes the exclusive flock of a session file (docs/sessions.md "One writer"); a held one is
// `<file>: in use by process <pid>` (std::runtime_error).
void lock_session_file(int fd, const fs::path& file) {
    // A holder that /proc/locks no longer lists has just let go: try again (a few times) rather
    // than report a process that is gone.
    for (int tries = 0; ::flock(fd, LOCK_EX | LOCK_NB) != 0; ++tries) {
        if (errno == EINTR) continue;
        const int err = errno;
        if (err != EWOULDBLOCK)
            throw std::system_error(err, std::generic_category(),
                                    "cannot lock session file " + file.string());
        std::string holder = "another process";
        struct stat st {};
        if (::fstat(fd, &st) == 0) {
            std::string locks;
            if (std::FILE* f = std::fopen("/proc/locks", "re")) {
                char buf[4096];
                for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
                    locks.append(buf, n);
                std::fclose(f);
            }
            if (auto pid = flock_holder(locks, st.st_dev, st.st_ino))
                holder = "process " + std::to_string(*pid);
            else if (tries < 100)
                continue;
        }
        throw std::runtime_error(file.string() + ": in use by " + holder);
    }
}

}  // namespace

session_history::session_history() : id_(random_hex_id(32)) {}

session_history::~session_history() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
}

session_history::session_history(session_history&& o) noexcept
    : id_(std::move(o.id_)),
      file_(std::move(o.file_)),
      fd_(std::exchange(o.fd_, -1)),
      entries_(std::move(o.entries_)) {}

session_history& session_history::operator=(session_history&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        id_ = std::move(o.id_);
        file_ = std::move(o.file_);
        fd_ = std::exchange(o.fd_, -1);
        entries_ = std::move(o.entries_);
    }
    return *this;
}

session_history::file_state& session_history::file_mode() {
    if (!file_) file_ = std::make_unique<file_state>();
    return *file_;
}

session_history session_history::create_file(const fs::path& dir, std::string cwd) {
    session_history h;
    h.file_mode().cwd = std::move(cwd);
    fs::path failed;
    if (auto ec = create_private_directories(dir, &failed))  // 0700: docs/reliability.md
        throw std::system_error(ec, "cannot create session directory " + failed.string());
    std::string ts = iso_timestamp(wall_clock_ms());
    for (char& c : ts)
        if (c == ':' || c == '.') c = '-';
    const auto& path = h.file_->path = dir / (ts + "_" + h.id_ + ".jsonl");
    // 0600 whatever the umask: conversations, tool output and echoed keys are the owner's only
    h.fd_ = ::open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (h.fd_ < 0 || ::fchmod(h.fd_, 0600) != 0)
        throw std::system_error(errno, std::generic_category(),
                                "cannot open session file " + path->string());
    lock_session_file(h.fd_, *path);  // for the life of the session
    return h;
}

std::optional<std::string> read_first_line(std::istream& in, std::size_t max_bytes) {
    std::string line;
    std::streambuf* sb = in.rdbuf();
    if (!sb) return std::nullopt;
    for (;;) {
        const int c = sb->sbumpc();
        if (c == std::char_traits<char>::eof()) {
            if (line.empty()) return std::nullopt;
            return line;
        }
        if (c == '\n') return line;
        if (line.size() == max_bytes) return std::nullopt;  // longer than the bound: not read on
        line.push_back(static_cast<char>(c));
    }
}

std::string not_stored_marker(std::size_t bytes) {
    return "\u2026[" + std::to_string(bytes) + " bytes not stored]";
}

namespace {

// `s` cut to at most `keep` bytes on a UTF-8 code-point boundary.
std::size_t utf8_cut_point(std::string_view s, std::size_t keep) {
    if (keep >= s.size()) return s.size();
    while (keep > 0 && (static_cast<unsigned char>(s[keep]) & 0xC0) == 0x80) --keep;
    return keep;
}

std::size_t serialized_size(const message& m) {
    std::string line;
    append_json(line, m);
    return line.size();
}

}  // namespace

message fit_message(const message& m, std::size_t max_bytes) {
    message out = m;
    for (int round = 0; round < 8; ++round) {
        const std::size_t size = serialized_size(out);
        if (size <= max_bytes) return out;
        // the largest text block or tool-call arguments gives up what is over, plus room for
        // its marker (a byte cut is at least a byte less once serialised)
        std::size_t excess = size - max_bytes + 64;
        std::size_t best = out.content.size(), best_size = 0;
        for (std::size_t i = 0; i < out.content.size(); ++i) {
            std::size_t n = 0;
            if (const auto* t = std::get_if<text_block>(&out.content[i]))
                n = t->text.size();
            else if (const auto* c = std::get_if<tool_call_block>(&out.content[i]))
                n = json::serialize(c->arguments).size();
            if (n > best_size) {
                best = i;
                best_size = n;
            }
        }
        if (best == out.content.size() || best_size <= 64) break;
        if (auto* t = std::get_if<text_block>(&out.content[best])) {
            const std::size_t keep =
                utf8_cut_point(t->text, t->text.size() - std::min(excess, t->text.size()));
            const std::size_t dropped = t->text.size() - keep;
            t->text.resize(keep);
            t->text += not_stored_marker(dropped);
        } else {
            auto& c = std::get<tool_call_block>(out.content[best]);
            c.arguments = json::object();
            c.arguments["\u2026"] = not_stored_marker(best_size);
        }
    }
    if (serialized_size(out) <= max_bytes) return out;
    // nothing left to cut (a message of many small blocks): one marker instead of its content
    message last = m;
    last.content.clear();
    last.content.emplace_back(text_block{not_stored_marker(serialized_size(m))});
    last.error_message.reset();
    return last;
}

std::error_code session_history::write_line(const json::object& o) {
    return write_text_line(json::serialize(o));
}

std::error_code session_history::write_text_line(std::string line) {
    if (fd_ < 0) return {};
    line.push_back('\n');
    // one write() of the whole line (O_APPEND): never a line in pieces next to another's
    std::string_view rest = line;
    while (!rest.empty()) {
        const ssize_t n = ::write(fd_, rest.data(), rest.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return {errno, std::generic_category()};
        }
        if (n == 0) return {EIO, std::generic_category()};
        rest.remove_prefix(static_cast<std::size_t>(n));  // a short write (disk full): the rest
    }
    return {};
}

std::error_code session_history::append_entry(std::string type, json::object fields) {
    message_ptr m;
    if (type == "message")
        if (auto* v = fields.if_contains("message"))
            m = std::make_shared<message>(message_from_json(*v));
    return append(std::move(type), std::move(fields), std::move(m));
}

std::error_code session_history::append_message(message_ptr m) {
    return append("message", {}, std::move(m));
}

std::error_code session_history::append(std::string type, json::object fields, message_ptr m) {
    history_entry e;
    e.id = random_hex_id(8);
    e.parent_id = entries_.empty() ? std::string() : entries_.back().id;
    e.type = std::move(type);
    e.msg = std::move(m);
    std::error_code ec;
    if (fd_ >= 0 || !e.msg) {  // in-memory sessions never serialise their messages
        json::object o;
        o["type"] = e.type;
        o["id"] = e.id;
        if (e.parent_id.empty())
            o["parentId"] = nullptr;
        else
            o["parentId"] = e.parent_id;
        o["timestamp"] =
            iso_timestamp(e.msg && e.msg->timestamp ? e.msg->timestamp : wall_clock_ms());
        for (auto& kv : fields) o[kv.key()] = std::move(kv.value());
        if (fd_ >= 0 && !file_mode().header_written) {
            json::object h;
            h["type"] = "session";
            h["version"] = 3;
            h["id"] = id_;
            h["timestamp"] = iso_timestamp(wall_clock_ms());
            h["cwd"] = file_->cwd;
            ec = write_line(h);
            if (!ec) file_->header_written = true;
        }
        if (!ec && fd_ >= 0) {
            // the message is written as text after the entry's own fields (no DOM of it); `raw`
            // keeps only those fields
            std::string line = json::serialize(o);
            if (e.msg && !o.contains("message")) {
                line.pop_back();
                const std::size_t fields = line.size();
                line += ",\"message\":";
                append_json(line, *e.msg);
                line.push_back('}');
                if (line.size() > max_line_bytes_) {
                    // never write what load() refuses: the content is cut, with a marker
                    line.resize(fields);
                    line += ",\"message\":";
                    append_json(line,
                                fit_message(*e.msg, max_line_bytes_ -
                                                        std::min(max_line_bytes_, fields + 16)));
                    line.push_back('}');
                }
            }
            ec = write_text_line(std::move(line));
        }
        e.raw = std::move(o);
    }
    entries_.push_back(std::move(e));
    return ec;
}

std::vector<message_ptr> session_history::messages() const {
    std::vector<message_ptr> out;
    for (const auto& e : entries_)
        if (e.msg) out.push_back(e.msg);
    return out;
}

std::vector<message_ptr> session_history::context() const {
    struct item {
        const std::string* id;
        message_ptr msg;
    };
    std::vector<item> ctx;
    for (const auto& e : entries_) {
        if (e.msg) {
            ctx.push_back({&e.id, e.msg});
            continue;
        }
        if (e.type != "compaction") continue;
        const auto* summary = e.raw.if_contains("summary");
        if (!summary || !summary->is_string()) continue;
        std::vector<item> next;
        auto m = make_user_message(summary_message_text(summary->get_string()));
        next.push_back({nullptr, std::make_shared<message>(std::move(m))});
        if (const auto* first = e.raw.if_contains("firstKeptEntryId");
            first && first->is_string()) {
            auto it = std::find_if(ctx.begin(), ctx.end(), [&](const item& i) {
                return i.id && *i.id == first->get_string();
            });
            next.insert(next.end(), it, ctx.end());
        }
        ctx = std::move(next);
    }
    std::vector<message_ptr> out;
    out.reserve(ctx.size());
    for (auto& i : ctx) out.push_back(std::move(i.msg));
    return out;
}

namespace {

// The session id in a file name "<timestamp>_<id>.jsonl" (create_file's), or "".
std::string id_from_file_name(const fs::path& file) {
    const std::string stem = file.stem().string();
    const auto us = stem.rfind('_');
    if (us == std::string::npos || us + 1 == stem.size()) return {};
    const std::string id = stem.substr(us + 1);
    for (char c : id)
        if (!std::isxdigit(static_cast<unsigned char>(c))) return {};
    return id;
}

// The lines of a file descriptor, read in 64 KiB pieces. A line longer than `max` is not kept:
// only its length is reported.
class file_lines {
  public:
    struct line {
        std::string text;  // without the LF
        std::size_t length = 0;
        bool too_long = false;
    };
    file_lines(int fd, std::size_t max, std::string label)
        : fd_(fd), max_(max), label_(std::move(label)) {}

    bool next(line& l) {
        l.text.clear();
        l.length = 0;
        l.too_long = false;
        for (;;) {
            if (pos_ == size_ && !fill()) {
                if (l.length == 0 && !l.too_long) return false;
                return true;  // a last line without LF
            }
            const std::string_view rest(buf_.data() + pos_, size_ - pos_);
            const auto nl = rest.find('\n');
            const std::string_view piece = rest.substr(0, nl);
            l.length += piece.size();
            if (!l.too_long && l.length > max_) {
                l.too_long = true;
                l.text.clear();
                l.text.shrink_to_fit();
            }
            if (!l.too_long) l.text.append(piece);
            if (nl == std::string_view::npos) {
                pos_ = size_;
                continue;
            }
            pos_ += nl + 1;
            return true;
        }
    }
    /// The file ended with a LF (or was empty).
    bool last_terminated() const noexcept { return !read_any_ || last_ == '\n'; }

  private:
    bool fill() {
        for (;;) {
            const ssize_t n = ::read(fd_, buf_.data(), buf_.size());
            if (n < 0) {
                if (errno == EINTR) continue;
                throw std::runtime_error(label_ +
                                         ": cannot read session file: " + std::strerror(errno));
            }
            if (n == 0) return false;
            size_ = static_cast<std::size_t>(n);
            pos_ = 0;
            last_ = buf_[size_ - 1];
            read_any_ = true;
            return true;
        }
    }

    int fd_;
    std::size_t max_;
    std::string label_;
    std::vector<char> buf_ = std::vector<char>(64 * 1024);
    std::size_t pos_ = 0, size_ = 0;
    char last_ = '\0';  // the last byte read
    bool read_any_ = false;
};

std::string mib(std::size_t bytes) {
    return std::to_string(bytes) + " bytes (" + std::to_string(bytes / (1024 * 1024)) + " MiB)";
}

}  // namespace

session_history::loaded session_history::load(const fs::path& file,
                                              const session_file_limits& limits) {
    const std::string label = file.string();
    loaded out;
    // opened once for reading and appending, and locked before it is read: no other process
    // writes it while this session lives (docs/sessions.md "One writer")
    out.history.fd_ = ::open(file.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
    if (out.history.fd_ < 0)
        throw std::runtime_error(label + ": cannot open session file: " + std::strerror(errno));
    const int fd = out.history.fd_;
    lock_session_file(fd, file);
    auto& fstate = out.history.file_mode();
    out.history.max_line_bytes_ = limits.max_line_bytes;
    // Read line by line: only the line being read is buffered (at most max_line_bytes; a longer
    // one is counted and dropped), so a file has no size limit of its own.
    file_lines reader(fd, limits.max_line_bytes, label);
    const auto blank = [](std::string_view s) {
        return s.find_first_not_of(" \t\r") == std::string_view::npos;
    };
    bool header_seen = false;
    std::optional<std::string> unparsable;  // where: torn or not, known at the next line
    std::size_t line_no = 0;
    for (file_lines::line l; reader.next(l);) {
        ++line_no;
        const std::string where = label + ":" + std::to_string(line_no);
        if (unparsable) {
            out.warnings.push_back(*unparsable + ": unparsable line skipped");
            unparsable.reset();
        }
        if (!header_seen) {
            // the header is the first line that is not blank (blank lines before it are skipped)
            if (!l.too_long && blank(l.text)) continue;
            const std::string line_ref = "line " + std::to_string(line_no);
            if (l.too_long)
                throw std::runtime_error(label + ": not a session file (" + line_ref +
                                         " exceeds the limit of " + mib(limits.max_line_bytes) +
                                         ")");
            auto parsed = parse_json_strict(l.text);
            const json::object* header =
                parsed && parsed.value.is_object() ? &parsed.value.get_object() : nullptr;
            const json::value* type = header ? header->if_contains("type") : nullptr;
            if (!type || *type != "session")
                throw std::runtime_error(label + ": not a session file (" + line_ref +
                                         " is not a {\"type\":\"session\"} header)");
            const json::value* id = header->if_contains("id");
            if (!id || !id->is_string() || id->get_string().empty())
                throw std::runtime_error(label + ": not a session file (" + line_ref +
                                         ": key \"id\": expected a non-empty string, found " +
                                         (id ? json_excerpt(*id) : std::string("nothing")) + ")");
            out.history.id_ = std::string(id->get_string());
            if (auto* c = header->if_contains("cwd"); c && c->is_string())
                fstate.cwd = c->get_string();
            fstate.header_written = true;
            header_seen = true;
            continue;
        }
        if (l.too_long) {
            out.warnings.push_back(where + ": line of " + std::to_string(l.length) +
                                   " bytes exceeds the limit of " + mib(limits.max_line_bytes) +
                                   "; skipped");
            continue;
        }
        if (l.text.empty()) continue;
        auto parsed = parse_json_strict(l.text);
        if (!parsed || !parsed.value.is_object()) {
            if (parsed.error && parsed.error->non_finite)
                out.warnings.push_back(where + ": " + parsed.error->describe() + "; line skipped");
            else
                unparsable = where;
            continue;
        }
        json::object* o = &parsed.value.get_object();
        history_entry e;
        if (auto* t = o->if_contains("type"); t && t->is_string()) e.type = t->get_string();
        if (auto* id = o->if_contains("id"); id && id->is_string()) e.id = id->get_string();
        if (auto* p = o->if_contains("parentId"); p && p->is_string())
            e.parent_id = p->get_string();
        if (e.type == "message") {
            try {
                e.msg = std::make_shared<message>(message_from_json((*o)["message"]));
            } catch (const std::exception& ex) {
                out.warnings.push_back(where + ": " + ex.what() + "; entry skipped");
                continue;
            }
        } else if (e.type != "compaction" && e.type != "model_change" &&
                   e.type != "thinking_level_change" && e.type != "session_info" &&
                   e.type != "retry_end" && e.type != "retry_park" && e.type != "retry_park_end" &&
                   e.type != "custom" && e.type != "label") {
            out.warnings.push_back(where + ": unknown entry type \"" + e.type + "\" kept");
        }
        e.raw = std::move(*o);
        out.history.entries_.push_back(std::move(e));
    }
    // a last line without a newline was cut by a crash unless it parses
    const bool last_terminated = reader.last_terminated();
    if (unparsable)
        out.warnings.push_back(*unparsable + ": torn last line skipped (" +
                               (last_terminated ? "unparsable" : "no newline") + ")");
    if (!header_seen) {
        // Created but never written to (killed before its first entry): an empty session. The
        // header is written with the first entry, as for a new session.
        out.history.id_ = id_from_file_name(file);
        if (out.history.id_.empty()) out.history.id_ = random_hex_id(32);
        std::error_code ec;
        fstate.cwd = fs::current_path(ec).string();
        fstate.header_written = false;
    }
    fstate.path = file;
    if (!last_terminated) {
        // start appends on a fresh line after a torn tail
        if (::write(fd, "\n", 1) != 1)
            throw std::system_error(errno, std::generic_category(),
                                    "cannot append to session file " + file.string());
    }
    return out;
}

std::optional<open_park> find_open_park(const std::vector<history_entry>& entries) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if (it->type == "retry_park_end") return std::nullopt;
        if (it->type != "retry_park") continue;
        const json::object& o = it->raw;
        const auto* until = o.if_contains("until");
        if (!until || !until->is_number()) return std::nullopt;
        open_park p;
        boost::system::error_code ec;
        p.until = until->to_number<std::int64_t>(ec);
        if (ec) return std::nullopt;
        if (const auto* a = o.if_contains("attempt");
            a && a->is_int64() && a->as_int64() > 0 && a->as_int64() < 1'000'000)
            p.attempt = static_cast<int>(a->as_int64());
        if (const auto* l = o.if_contains("limit"); l && l->is_string())
            for (const limit_kind k :
                 {limit_kind::rate, limit_kind::quota, limit_kind::billing, limit_kind::capacity,
                  limit_kind::server, limit_kind::transport})
                if (to_string(k) == l->get_string()) p.limit = k;
        if (const auto* e = o.if_contains("errorMessage"); e && e->is_string())
            p.error_message = std::string(e->get_string());
        if (const auto* pr = o.if_contains("provider"); pr && pr->is_string())
            p.provider = std::string(pr->get_string());
        return p;
    }
    return std::nullopt;
}

}  // namespace coagent
