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

/// What is sent: the context with failed (error / aborted) assistant messages removed.
struct provider_request {
    model_info model;
    std::string system_prompt;
    std::vector<message_ptr> messages;
    std::vector<tool_definition> tools;
    std::string session_id;
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
