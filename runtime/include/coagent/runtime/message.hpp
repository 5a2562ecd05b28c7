#pragma once
// The message value types every layer shares: user, assistant and toolResult messages,
// token usage, and the model a session talks to. JSON shapes follow the reference agent.

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace coagent {

namespace json = boost::json;

// one byte each: they sit together at the start of `message` (see there)
enum class message_role : std::uint8_t { user, assistant, tool_result };
enum class stop_reason : std::uint8_t { stop, length, tool_use, error, aborted };

std::string_view to_string(message_role r) noexcept;
std::string_view to_string(stop_reason r) noexcept;
std::optional<message_role> role_from_string(std::string_view s) noexcept;
std::optional<stop_reason> stop_reason_from_string(std::string_view s) noexcept;

struct text_block {
    std::string text;
};

struct tool_call_block {
    std::string id;
    std::string name;
    json::object arguments;
};

/// An image in a user or toolResult message, as the reference writes it:
/// {type:"image", data:<base64>, mimeType}. `data` is kept as given (base64 text).
struct image_block {
    std::string data;
    std::string mime_type;
};

/// The model's thinking in an assistant message: {type:"thinking", thinking,
/// thinkingSignature?, redacted?}. The signature (Anthropic) is opaque and sent back byte for
/// byte; a redacted block holds the provider's encrypted payload in `signature` and a
/// placeholder text in `thinking` (the reference's "[Reasoning redacted]").
struct thinking_block {
    std::string thinking;
    std::optional<std::string> signature;
    bool redacted = false;
};

/// Why `image` cannot be sent (its mimeType is not `image/…`, or its data is empty or not
/// base64: letters, digits, `+`, `/`, then at most two `=`), or nullopt when it can: one check
/// for RPC `images` and `--image`.
std::optional<std::string> image_error(const image_block& image);

/// The base64 text of `bytes` (RFC 4648, with padding).
std::string base64_encode(std::string_view bytes);

using content_block = std::variant<text_block, tool_call_block, image_block, thinking_block>;

struct token_cost {
    double input = 0, output = 0, cache_read = 0, cache_write = 0, total = 0;
};

struct token_usage {
    std::int64_t input = 0;
    std::int64_t output = 0;
    std::int64_t cache_read = 0;
    std::int64_t cache_write = 0;
    std::int64_t total_tokens = 0;
    token_cost cost;
};

/// One message of a conversation. Which fields matter depends on `role`:
/// assistant messages carry api/provider/model/usage/stop/error_*; toolResult messages
/// carry tool_call_id/tool_name/is_error. The small fields come first, packed together (every
/// session keeps its messages: 16 bytes less padding per message).
struct message {
    message_role role = message_role::user;
    stop_reason stop = stop_reason::stop;  // assistant
    bool is_error = false;                 // toolResult
    // assistant: the response's x-should-retry header, when it had one
    std::optional<bool> should_retry;
    // assistant: structured error detail beside the text (not part of the reference's shape)
    std::optional<int> error_status;
    std::vector<content_block> content;
    std::int64_t timestamp = 0;  // milliseconds since the Unix epoch

    // assistant
    std::string api;
    std::string provider;
    std::string model;
    token_usage usage;
    std::optional<std::string> error_message;
    // structured error details beside the text (not part of the reference's shape)
    std::string error_type;

    // toolResult
    std::string tool_call_id;
    std::string tool_name;
};

using message_ptr = std::shared_ptr<const message>;

/// Wall-clock now in ms since the epoch (message timestamps only; never used for timing).
std::int64_t wall_clock_ms() noexcept;

message make_user_message(std::string text);
/// A user message of `text` followed by `images` (the reference's order), one content block
/// each; without images the same as make_user_message(text).
message make_user_message(std::string text, std::vector<image_block> images);
message make_tool_result(std::string tool_call_id, std::string tool_name, std::string text,
                         bool is_error);

/// Concatenated text blocks of a message.
std::string text_of(const message& m);
/// An assistant message that failed or was aborted: never sent back to a provider.
bool is_failed_assistant(const message& m) noexcept;
/// The image blocks of a message.
std::size_t image_count(const message& m) noexcept;
/// The tool calls of an assistant message, in order.
std::vector<const tool_call_block*> tool_calls_of(const message& m);

/// The message in the reference agent's JSON shape, written straight into `out` (the hot path:
/// events, session lines). to_json() is the same as a DOM.
void append_json(std::string& out, const message& m);
void append_json(std::string& out, const token_usage& u);
json::object to_json(const message& m);
json::object to_json(const token_usage& u);
/// Parses a message in the reference agent's JSON shape. Throws std::invalid_argument with a
/// message naming the offending field.
message message_from_json(const json::value& v);

/// The model a session talks to.
/// Price per million tokens (models.json "cost"; 0 when not given).
struct model_cost {
    double input = 0, output = 0, cache_read = 0, cache_write = 0;
};

struct model_info {
    model_info() = default;
    /// The fields every provider has; the rest are descriptive (reported, e.g. by RPC).
    model_info(std::string provider_, std::string id_, std::string api_,
               std::int64_t context_window_ = 0, std::int64_t max_tokens_ = 0)
        : provider(std::move(provider_)),
          id(std::move(id_)),
          api(std::move(api_)),
          context_window(context_window_),
          max_tokens(max_tokens_) {}

    std::string provider;
    std::string id;
    std::string api;
    std::int64_t context_window = 0;  // 0 = unknown
    std::int64_t max_tokens = 0;
    std::string name;      // empty: the id
    std::string base_url;  // empty for the embedded faux provider
    bool reasoning = false;
    bool image_input = false;  // "input":["text","image"]
    model_cost cost;
};

/// The reference agent's Model object: {id, name, api, provider, baseUrl, reasoning, input,
/// cost:{input, output, cacheRead, cacheWrite}, contextWindow, maxTokens}.
json::object to_json(const model_info& m);

}  // namespace coagent
