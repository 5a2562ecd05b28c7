#pragma once
// Session events: typed values on the hot path, serialised to the reference agent's JSON
// shapes (docs/architecture.md "Events") only where a consumer needs JSON (RPC, json mode, logs).

#include <coagent/runtime/limit.hpp>
#include <coagent/runtime/message.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace coagent {

struct agent_start_event {};
struct turn_start_event {};
struct message_start_event {
    message_ptr message;
};
/// What a message_update's delta extends: a text block (`text_delta`) or a thinking block
/// (`thinking_delta`).
enum class delta_kind : std::uint8_t { text, thinking };
struct message_update_event {
    message_ptr message;  // the partial message so far
    std::string delta;    // text appended by this update
    delta_kind kind = delta_kind::text;
};
struct message_end_event {
    message_ptr message;
};
struct tool_execution_start_event {
    std::string tool_call_id;
    std::string tool_name;
    json::object args;
};
struct tool_execution_end_event {
    std::string tool_call_id;
    std::string tool_name;
    json::value result;
    bool is_error = false;
};
struct turn_end_event {
    message_ptr message;
    std::vector<message_ptr> tool_results;
};
struct agent_end_event {
    std::vector<message_ptr> messages;  // the messages this run added
    bool will_retry = false;
};
/// What a failed attempt had streamed before it failed, and a retry throws away
/// (auto_retry_start's `discarded`): clients retract what they showed of it.
struct discarded_output {
    std::int64_t text_chars = 0;      ///< Unicode code points of its text blocks
    std::int64_t thinking_chars = 0;  ///< Unicode code points of its thinking blocks
    std::int64_t tool_calls = 0;      ///< tool calls it had started
    friend bool operator==(const discarded_output&, const discarded_output&) = default;
};
/// What `failed` (the failed attempt's assistant message; null: nothing) leaves behind.
discarded_output discarded_of(const message* failed) noexcept;

struct auto_retry_start_event {
    int attempt = 0;
    int max_attempts = 0;
    std::int64_t delay_ms = 0;
    std::string error_message;
    limit_kind limit = limit_kind::none;  // coagent's extra field `limit` (typed limits)
    discarded_output discarded;           // coagent's extra field `discarded`
};
/// A request too large for the provider (413 / request_too_large) while the context held
/// images: all but the newest were replaced by a placeholder in the context requests are built
/// from (the session file keeps them), and the turn is tried once more (docs/retry-policy.md
/// §11.33).
struct images_omitted_event {
    std::int64_t omitted = 0;   ///< images replaced by the placeholder
    std::string error_message;  ///< the failed reply's error
};
/// The text an omitted image is replaced by.
inline constexpr std::string_view omitted_image_text = "[image omitted: the request was too large]";
struct auto_retry_end_event {
    bool success = false;
    int attempt = 0;
    std::optional<std::string> final_error;
};
struct compaction_start_event {
    std::string reason;  // "manual" | "threshold" | "overflow"
};
struct compaction_end_event {
    std::string reason;
    std::optional<json::value> result;
    bool aborted = false;
    bool will_retry = false;
    std::optional<std::string> error_message;
};
struct extension_error_event {
    std::string extension_path;
    std::string event;
    std::string error;
};
/// The usage-limit path put the current model aside and switched to the next model of its
/// `retry.fallbackChains` role (selectors "provider/model").
struct retry_fallback_applied_event {
    std::string from;
    std::string to;
    std::string role;
};
/// The first successful reply on a fallback model (emitted before auto_retry_end).
struct retry_fallback_succeeded_event {
    std::string model;
    std::string role;
};
/// A wait above retry.maxDelayMs parked the prompt (retry.longWait "park", docs/retry-policy.md
/// §11.25): it resumes by itself at `until` (epoch ms), after auto_retry_start.
struct retry_parked_event {
    std::int64_t until = 0;
    limit_kind limit = limit_kind::none;
    std::string error_message;
};
struct agent_settled_event {};

using event =
    std::variant<agent_start_event, turn_start_event, message_start_event, message_update_event,
                 message_end_event, tool_execution_start_event, tool_execution_end_event,
                 turn_end_event, agent_end_event, auto_retry_start_event, auto_retry_end_event,
                 compaction_start_event, compaction_end_event, extension_error_event,
                 retry_fallback_applied_event, retry_fallback_succeeded_event, retry_parked_event,
                 agent_settled_event, images_omitted_event>;

/// The event's `type` string, e.g. "auto_retry_start".
std::string_view event_type(const event& e) noexcept;

/// The event as the JSON text RPC mode writes (`type` first), appended to `out` without a DOM.
void append_json(std::string& out, const event& e);
/// The same as a JSON object.
json::object to_json(const event& e);

}  // namespace coagent
