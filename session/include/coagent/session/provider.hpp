#pragma once
// The provider interface: one call streams one assistant reply for one request. Exactly one
// attempt per call; retries are the session's business.

#include <coagent/runtime/abort_signal.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/session/auth_storage.hpp>

#include <boost/asio/awaitable.hpp>

#include <memory>

#include <string>
#include <string_view>
#include <vector>

namespace coagent {

struct tool_definition {
    std::string name;
    std::string description;
    json::object parameters;  // JSON schema
};

/// A request body resends the whole conversation on every turn. A codec keeps the text it wrote
/// for each message here and copies it on the next request when the message at that position
/// is still the same object (messages are immutable once in the history) and the wire format is
/// the same. Owned by the session that sends the requests, one request at a time. The newest
/// message of a request is not kept: it may be a prefill or a prompt sent once, and a session
/// of one message (parked in its first backoff) keeps nothing.
class wire_fragments {
  public:
    /// The text kept for message `i` of a request, if it was written for `m` in `format`.
    const std::string* find(std::size_t i, const message_ptr& m, std::uint64_t format) const {
        if (i >= entries_.size()) return nullptr;
        const entry& e = entries_[i];
        return e.msg == m && e.format == format ? &e.text : nullptr;
    }
    void keep(std::size_t i, message_ptr m, std::uint64_t format, std::string_view text) {
        if (entries_.size() <= i) entries_.resize(i + 1);
        entry& e = entries_[i];
        e.msg = std::move(m);
        e.format = format;
        e.text.assign(text);
    }
    /// Forgets the positions from `n` on (the conversation got shorter: compaction, a drop).
    void trim(std::size_t n) {
        if (entries_.size() > n) entries_.resize(n);
    }
    std::size_t size() const noexcept { return entries_.size(); }

  private:
    struct entry {
        message_ptr msg;  // held: its address cannot be reused by another message
        std::uint64_t format = ~std::uint64_t{0};
        std::string text;
    };
    std::vector<entry> entries_;
};

/// What is sent: the context with failed (error / aborted) assistant messages removed.
struct provider_request {
    model_info model;
    std::string system_prompt;
    std::vector<message_ptr> messages;
    std::vector<tool_definition> tools;
    std::string session_id;
    /// Where the codec keeps each message's text between requests; none: written every time.
    wire_fragments* fragments = nullptr;
    /// thinkingLevel: how much the model thinks; the wire formats send it only when
    /// effective_thinking_level() says so.
    thinking_level thinking = thinking_level::off;
};

/// The level a request is sent with: `level`, or off on a model that does not reason
/// (models.json "reasoning": false) — a level there is ignored, never sent.
constexpr thinking_level effective_thinking_level(const model_info& m,
                                                  thinking_level level) noexcept {
    return m.reasoning ? level : thinking_level::off;
}

/// Receives the progress of a streamed reply; `partial` is the message being filled.
class stream_observer {
  public:
    virtual ~stream_observer() = default;
    virtual void on_message_start(const message& partial) = 0;
    virtual void on_text_delta(const message& partial, std::string_view delta) = 0;
    /// Thinking appended to the last thinking block of `partial` (Anthropic thinking_delta).
    /// Redacted thinking and signatures arrive whole in the message, without a delta.
    virtual void on_thinking_delta(const message& partial, std::string_view delta) {
        (void)partial;
        (void)delta;
    }
};

class provider {
  public:
    virtual ~provider() = default;

    /// The model this provider answers with.
    virtual model_info model() const = 0;

    /// The credentials it takes its keys from, if any: the session's usage-limit path marks
    /// the limit there when the session was given no auth_storage of its own.
    virtual std::shared_ptr<auth_storage> credentials() const { return nullptr; }

    /// Streams one reply into `out` (role, api/provider/model already set by the caller).
    /// Completes on the session's executor when the reply ended; expected failures are values:
    /// `out.stop` = error with `out.error_message` (and `error_status` when known), or aborted
    /// when `abort` was requested (checked on start and after every resume; waits are bound
    /// to abort.slot()). Calls observer.on_message_start once before any delta. `req`, `out`,
    /// `observer` and `abort` must outlive the operation. Never throws for provider errors.
    virtual boost::asio::awaitable<void> stream(const provider_request& req, message& out,
                                                stream_observer& observer, abort_signal& abort) = 0;
};

}  // namespace coagent
