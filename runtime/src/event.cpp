#include <coagent/runtime/event.hpp>
#include <coagent/runtime/json_text.hpp>

#include <boost/json/parse.hpp>

namespace coagent {

namespace {

template <class... Fs>
struct overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

}  // namespace

discarded_output discarded_of(const message* failed) noexcept {
    discarded_output d;
    if (!failed) return d;
    // code points: every byte that does not continue a UTF-8 sequence starts one
    const auto code_points = [](std::string_view s) {
        std::int64_t n = 0;
        for (const char c : s)
            if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
        return n;
    };
    for (const auto& b : failed->content) {
        if (const auto* t = std::get_if<text_block>(&b)) {
            d.text_chars += code_points(t->text);
        } else if (const auto* th = std::get_if<thinking_block>(&b)) {
            // a redacted block's placeholder is not thinking the client was shown
            if (!th->redacted) d.thinking_chars += code_points(th->thinking);
        } else if (std::holds_alternative<tool_call_block>(b)) {
            ++d.tool_calls;
        }
    }
    return d;
}

std::string_view event_type(const event& e) noexcept {
    return std::visit(
        overloaded{
            [](const agent_start_event&) -> std::string_view { return "agent_start"; },
            [](const turn_start_event&) -> std::string_view { return "turn_start"; },
            [](const message_start_event&) -> std::string_view { return "message_start"; },
            [](const message_update_event&) -> std::string_view { return "message_update"; },
            [](const message_end_event&) -> std::string_view { return "message_end"; },
            [](const tool_execution_start_event&) -> std::string_view {
                return "tool_execution_start";
            },
            [](const tool_execution_end_event&) -> std::string_view {
                return "tool_execution_end";
            },
            [](const turn_end_event&) -> std::string_view { return "turn_end"; },
            [](const agent_end_event&) -> std::string_view { return "agent_end"; },
            [](const auto_retry_start_event&) -> std::string_view { return "auto_retry_start"; },
            [](const auto_retry_end_event&) -> std::string_view { return "auto_retry_end"; },
            [](const compaction_start_event&) -> std::string_view { return "compaction_start"; },
            [](const compaction_end_event&) -> std::string_view { return "compaction_end"; },
            [](const extension_error_event&) -> std::string_view { return "extension_error"; },
            [](const retry_fallback_applied_event&) -> std::string_view {
                return "retry_fallback_applied";
            },
            [](const retry_fallback_succeeded_event&) -> std::string_view {
                return "retry_fallback_succeeded";
            },
            [](const retry_parked_event&) -> std::string_view { return "retry_parked"; },
            [](const agent_settled_event&) -> std::string_view { return "agent_settled"; },
            [](const images_omitted_event&) -> std::string_view { return "images_omitted"; },
        },
        e);
}

namespace {
namespace jt = json_text;
using jt::field;
using jt::field_bool;
using jt::field_int;
using jt::field_json;

void append_message(std::string& out, const message_ptr& m) {
    if (m)
        append_json(out, *m);
    else
        out += "null";
}

void append_messages(std::string& out, const std::vector<message_ptr>& ms) {
    out.push_back('[');
    for (std::size_t i = 0; i < ms.size(); ++i) {
        if (i) out.push_back(',');
        append_message(out, ms[i]);
    }
    out.push_back(']');
}

void field_message(std::string& out, std::string_view key, const message_ptr& m) {
    out.push_back(',');
    jt::append_key(out, key);
    append_message(out, m);
}
}  // namespace

void append_json(std::string& out, const event& e) {
    out += R"({"type":")";
    out += event_type(e);
    out.push_back('"');
    std::visit(overloaded{
                   [](const agent_start_event&) {},
                   [](const turn_start_event&) {},
                   [&](const message_start_event& x) { field_message(out, "message", x.message); },
                   [&](const message_update_event& x) {
                       field_message(out, "message", x.message);
                       out += x.kind == delta_kind::thinking
                                  ? R"(,"assistantMessageEvent":{"type":"thinking_delta","delta":)"
                                  : R"(,"assistantMessageEvent":{"type":"text_delta","delta":)";
                       jt::append_string(out, x.delta);
                       out.push_back('}');
                   },
                   [&](const message_end_event& x) { field_message(out, "message", x.message); },
                   [&](const tool_execution_start_event& x) {
                       field(out, "toolCallId", x.tool_call_id);
                       field(out, "toolName", x.tool_name);
                       out += R"(,"args":)";
                       jt::append_value(out, x.args);
                   },
                   [&](const tool_execution_end_event& x) {
                       field(out, "toolCallId", x.tool_call_id);
                       field(out, "toolName", x.tool_name);
                       field_json(out, "result", x.result);
                       field_bool(out, "isError", x.is_error);
                   },
                   [&](const turn_end_event& x) {
                       field_message(out, "message", x.message);
                       out += R"(,"toolResults":)";
                       append_messages(out, x.tool_results);
                   },
                   [&](const agent_end_event& x) {
                       out += R"(,"messages":)";
                       append_messages(out, x.messages);
                       field_bool(out, "willRetry", x.will_retry);
                   },
                   [&](const auto_retry_start_event& x) {
                       field_int(out, "attempt", x.attempt);
                       field_int(out, "maxAttempts", x.max_attempts);
                       field_int(out, "delayMs", x.delay_ms);
                       field(out, "errorMessage", x.error_message);
                       field(out, "limit", to_string(x.limit));
                       out += R"(,"discarded":{"textChars":)";
                       out += std::to_string(x.discarded.text_chars);
                       out += R"(,"thinkingChars":)";
                       out += std::to_string(x.discarded.thinking_chars);
                       out += R"(,"toolCalls":)";
                       out += std::to_string(x.discarded.tool_calls);
                       out.push_back('}');
                   },
                   [&](const auto_retry_end_event& x) {
                       field_bool(out, "success", x.success);
                       field_int(out, "attempt", x.attempt);
                       if (x.final_error) field(out, "finalError", *x.final_error);
                   },
                   [&](const compaction_start_event& x) { field(out, "reason", x.reason); },
                   [&](const compaction_end_event& x) {
                       field(out, "reason", x.reason);
                       if (x.result) field_json(out, "result", *x.result);
                       field_bool(out, "aborted", x.aborted);
                       field_bool(out, "willRetry", x.will_retry);
                       if (x.error_message) field(out, "errorMessage", *x.error_message);
                   },
                   [&](const extension_error_event& x) {
                       field(out, "extensionPath", x.extension_path);
                       field(out, "event", x.event);
                       field(out, "error", x.error);
                   },
                   [&](const retry_fallback_applied_event& x) {
                       field(out, "from", x.from);
                       field(out, "to", x.to);
                       field(out, "role", x.role);
                   },
                   [&](const retry_fallback_succeeded_event& x) {
                       field(out, "model", x.model);
                       field(out, "role", x.role);
                   },
                   [&](const retry_parked_event& x) {
                       field_int(out, "until", x.until);
                       field(out, "limit", to_string(x.limit));
                       field(out, "errorMessage", x.error_message);
                   },
                   [](const agent_settled_event&) {},
                   [&](const images_omitted_event& x) {
                       field_int(out, "omitted", x.omitted);
                       field(out, "errorMessage", x.error_message);
                   },
               },
               e);
    out.push_back('}');
}

json::object to_json(const event& e) {
    std::string text;
    append_json(text, e);
    return json::parse(text).as_object();
}

}  // namespace coagent
