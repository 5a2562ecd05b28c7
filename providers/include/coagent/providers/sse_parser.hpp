#pragma once
// A sans-io parser for Server-Sent Events (the WHATWG "text/event-stream" format) as the LLM
// streaming APIs use it: feed it bytes as they arrive, in chunks of any size, and it calls back
// once per complete event. No I/O, no allocation per event in the steady state.
//
// Rules (WHATWG HTML §9.2.6): lines end with CRLF, LF or CR (also split across chunks); a
// leading UTF-8 BOM is skipped; lines starting with ':' are comments; "field: value" drops one
// space after the colon; `data` lines are joined with '\n'; `event` sets the type (default
// "message"); `id` sets the last event id (ignored if it contains NUL); `retry` takes digits
// only; unknown fields are ignored; a blank line dispatches the event unless its data is empty.
// At the end of the stream an unterminated event is discarded (finish()).
//
// Bounded: an event whose fields (data + event type + the line being read) grow beyond
// `max_event_bytes` stops the parser with sse_parser::status::event_too_large, so a hostile or
// broken server cannot make the client buffer without limit.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace coagent {

/// One dispatched event. `data` has its final '\n' removed.
struct sse_event {
    std::string type = "message";  ///< the `event:` field, "message" when absent
    std::string data;
    std::string id;                        ///< the last event id seen so far
    std::optional<std::int64_t> retry_ms;  ///< a `retry:` field of this event
};

class sse_parser {
  public:
    enum class status { ok, event_too_large };

    static constexpr std::size_t default_max_event_bytes = std::size_t{16} << 20;  // 16 MiB

    explicit sse_parser(std::size_t max_event_bytes = default_max_event_bytes) noexcept
        : max_(max_event_bytes) {}

    /// Parses `bytes`; calls `on_event(const sse_event&)` for every event completed by them (the
    /// reference is valid only during the call). Returns status::ok, or event_too_large once the
    /// limit was crossed (then every later call returns it too and nothing more is dispatched).
    /// `on_event` may throw; the parser is then in an unspecified but valid state.
    template <typename OnEvent>
    status feed(std::string_view bytes, OnEvent&& on_event);

    /// End of stream: drops a partial line and an undispatched event (per the standard).
    void finish() noexcept;

    /// Back to the initial state (keeps the limit, clears the last event id).
    void reset() noexcept;

    status state() const noexcept { return status_; }
    /// Events dispatched so far.
    std::uint64_t events() const noexcept { return events_; }
    /// Bytes of the stream that are not comments (nor the blank lines after them) so far: a
    /// reader's idle timer restarts only when this grows, so `: ping` lines do not keep a
    /// stalled stream alive.
    std::uint64_t progress() const noexcept { return progress_; }

  private:
    template <typename OnEvent>
    status body(std::string_view bytes, OnEvent& on_event);
    // The first CR or LF in `bytes`, or npos. (string_view::find_first_of("\r\n") calls
    // memchr on the two-character set once per byte: half the parser's time in a profile.)
    static std::size_t line_end(std::string_view bytes) noexcept {
        const char* b = bytes.data();
        const void* lf = std::memchr(b, '\n', bytes.size());
        const std::size_t before_lf =
            lf ? static_cast<std::size_t>(static_cast<const char*>(lf) - b) : bytes.size();
        if (const void* cr = std::memchr(b, '\r', before_lf))
            return static_cast<std::size_t>(static_cast<const char*>(cr) - b);
        return lf ? before_lf : std::string_view::npos;
    }
    // Processes one complete line (without its terminator); true when an event is complete.
    bool line(std::string_view l);
    // Would the event being built exceed the limit with a line of `line_bytes`?
    bool over_limit(std::size_t line_bytes) const noexcept;
    void clear_event() noexcept;

    std::size_t max_;
    status status_ = status::ok;
    std::size_t bom_seen_ = 0;  // bytes of a leading BOM seen; 3 = decided
    bool pending_cr_ = false;   // the previous chunk ended with CR: skip one LF at the start
    std::string partial_;       // a line split across chunks
    sse_event ev_;              // the event being built
    bool has_data_ = false;     // a data line was seen (the data may still be empty)
    std::uint64_t events_ = 0;
    std::uint64_t progress_ = 0;
};

template <typename OnEvent>
sse_parser::status sse_parser::feed(std::string_view bytes, OnEvent&& on_event) {
    if (status_ != status::ok) return status_;
    if (bom_seen_ < 3) {
        // A leading BOM, possibly split across chunks.
        static constexpr std::string_view bom = "\xEF\xBB\xBF";
        while (!bytes.empty() && bom_seen_ < 3 && bytes.front() == bom[bom_seen_]) {
            ++bom_seen_;
            bytes.remove_prefix(1);
        }
        if (bom_seen_ < 3) {
            if (bytes.empty()) return status_;  // may still become a BOM
            // Not a BOM after all: the bytes taken for one are data.
            const std::size_t taken = bom_seen_;
            bom_seen_ = 3;
            if (taken > 0 && body(bom.substr(0, taken), on_event) != status::ok) return status_;
        }
    }
    return body(bytes, on_event);
}

template <typename OnEvent>
sse_parser::status sse_parser::body(std::string_view bytes, OnEvent& on_event) {
    if (pending_cr_ && !bytes.empty()) {
        pending_cr_ = false;
        if (bytes.front() == '\n') bytes.remove_prefix(1);
    }
    while (!bytes.empty()) {
        const std::size_t i = line_end(bytes);
        if (i == std::string_view::npos) {
            if (over_limit(partial_.size() + bytes.size()))
                return status_ = status::event_too_large;
            if ((partial_.empty() ? bytes.front() : partial_.front()) != ':')
                progress_ += bytes.size();
            partial_.append(bytes);
            return status_;
        }
        std::string_view l = bytes.substr(0, i);
        std::size_t skip = i + 1;
        if (bytes[i] == '\r') {
            if (skip < bytes.size()) {
                if (bytes[skip] == '\n') ++skip;
            } else {
                pending_cr_ = true;  // a LF may start the next chunk
            }
        }
        bytes.remove_prefix(skip);
        bool dispatch;
        if (!partial_.empty()) {
            if (over_limit(partial_.size() + l.size())) return status_ = status::event_too_large;
            if (partial_.front() != ':') progress_ += l.size() + 1;
            partial_.append(l);
            dispatch = line(partial_);
            partial_.clear();
        } else {
            if (over_limit(l.size())) return status_ = status::event_too_large;
            if (!l.empty() && l.front() != ':') progress_ += l.size() + 1;
            dispatch = line(l);
            if (dispatch && l.empty()) ++progress_;  // the blank line that ends an event
        }
        if (status_ != status::ok) return status_;
        if (dispatch) {
            ++events_;
            on_event(static_cast<const sse_event&>(ev_));
            clear_event();
        }
    }
    return status_;
}

}  // namespace coagent
