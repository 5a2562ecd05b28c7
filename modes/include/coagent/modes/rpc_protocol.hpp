#pragma once
// The RPC protocol of `coagent --mode rpc` without I/O (docs/rpc.md): the LF-only line framer
// with its size limit, UTF-8 validation, command parsing into typed values, and the response
// envelope. Pure functions and a small state machine, so tests and fuzzers drive them directly.

#include <coagent/runtime/message.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/runtime/streaming_behavior.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace coagent::rpc {

/// The longest input line accepted (bytes, without the LF): 16 MiB.
inline constexpr std::size_t default_max_line_bytes = std::size_t{16} * 1024 * 1024;

/// Splits a byte stream into lines on LF only (U+2028 / U+2029 are data), dropping one
/// trailing CR. A line longer than the limit is never buffered whole: once it passes the
/// limit its bytes are discarded up to the next LF and it is reported as `too_long`.
class line_reader {
  public:
    struct item {
        enum class kind { line, too_long };
        kind type = kind::line;
        std::string text;      // line: the line without LF / trailing CR; too_long: empty
        std::size_t size = 0;  // bytes of the line as received, without the LF
    };

    explicit line_reader(std::size_t max_line_bytes = default_max_line_bytes) noexcept
        : max_(max_line_bytes) {}

    /// Consumes `data`; appends every line it completes to `out`, in order.
    void feed(std::string_view data, std::vector<item>& out);
    /// End of input: the last line if it had no LF (a line, or too_long), else nothing.
    std::optional<item> finish();

    std::size_t max_line_bytes() const noexcept { return max_; }
    /// Bytes held for the unfinished line (never more than max_line_bytes()).
    std::size_t buffered() const noexcept { return buf_.size(); }

  private:
    item take_line();

    std::size_t max_;
    std::string buf_;
    bool discarding_ = false;
    std::size_t discarded_ = 0;
};

/// Offset of the first byte that is not valid UTF-8 (overlong forms, surrogates and code
/// points above U+10FFFF are invalid), or nullopt if `s` is valid.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

enum class command_kind {
    prompt,
    steer,
    follow_up,
    abort,
    abort_retry,
    retry_now,
    set_auto_retry,
    set_auto_compaction,
    compact,
    get_state,
    get_messages,
    get_last_assistant_text,
    new_session,
    set_model,
    get_available_models,
    get_session_stats,
    set_session_name,
    set_thinking_level,
    cycle_thinking_level,
};

/// The command's wire name ("abort_retry").
std::string_view to_string(command_kind k) noexcept;
std::optional<command_kind> command_from_string(std::string_view s) noexcept;

/// A parsed, type-checked command. Only the fields of its kind are set.
struct command {
    command_kind kind = command_kind::get_state;
    std::optional<boost::json::value> id;                    // echoed as is on the response
    std::string message;                                     // prompt / steer / follow_up
    std::vector<image_block> images;                         // prompt / steer / follow_up
    streaming_behavior behavior = streaming_behavior::none;  // prompt: streamingBehavior
    bool enabled = false;                                    // set_auto_retry / set_auto_compaction
    std::optional<std::string> custom_instructions;          // compact
    std::optional<std::string> parent_session;               // new_session
    std::string provider;                                    // set_model
    std::string model_id;                                    // set_model
    std::string name;                            // set_session_name (as sent, not trimmed)
    thinking_level level = thinking_level::off;  // set_thinking_level
};

/// A line that could not be turned into a command: answer it with error_response(id,
/// command, error). `command` is the request's `type` when it was a string, else "parse".
struct command_error {
    std::optional<boost::json::value> id;
    std::string command;
    std::string error;
};

using parse_result = std::variant<command, command_error>;

/// Parses one input line (UTF-8 checked, JSON, an object with a string `type`, a known
/// command, its fields type-checked; unknown extra fields are ignored).
parse_result parse_command(std::string_view line);

/// The command as a request object, the inverse of parse_command: `type`, the fields of its
/// kind in wire form (`streamingBehavior` only when not none, optional ones only when set),
/// then `id` when set. rpc_client writes its commands with it.
boost::json::object to_json(const command& c);

/// The answer to a line over the limit.
command_error too_long_error(std::size_t size, std::size_t limit);

/// `{"id"?,"type":"response","command":…,"success":true,"data"?:…}`
boost::json::object success_response(const std::optional<boost::json::value>& id,
                                     std::string_view command,
                                     std::optional<boost::json::value> data = std::nullopt);
/// `{"id"?,"type":"response","command":…,"success":false,"error":…}`
boost::json::object error_response(const std::optional<boost::json::value>& id,
                                   std::string_view command, std::string_view error);
boost::json::object error_response(const command_error& e);

/// The object serialised as one line, LF-terminated.
std::string to_line(const boost::json::object& o);

}  // namespace coagent::rpc
