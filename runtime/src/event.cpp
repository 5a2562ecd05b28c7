#include <coagent/runtime/event.hpp>

namespace coagent {

namespace {

template <class... Fs>
struct overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

json::value msg_json(const message_ptr& m) { return m ? json::value(to_json(*m)) : json::value(nullptr); }

}  // namespace

std::string_view event_type(const event& e) noexcept {
    return std::visit(
        overloaded{
            [](const agent_start_event&) -> std::string_view { return "agent_start"; },
            [](const turn_start_event&) -> std::string_view { return "turn_start"; },
            [](const message_start_event&) -> std::string_view { return "message_start"; },
            [](const message_update_event&) -> std::string_view { return "message_update"; },
            [](const message_end_event&) -> std::string_view { return "message_end"; },
            [](const tool_execution_start_event&) -> std::string_view { return "tool_execution_start"; },
            [](const tool_execution_end_event&) -> std::string_view { return "tool_execution_end"; },
            [](const turn_end_event&) -> std::string_view { return "turn_end"; },
            [](const agent_end_event&) -> std::string_view { return "agent_end"; },
            [](const auto_retry_start_event&) -> std::string_view { return "auto_retry_start"; },
            [](const auto_retry_end_event&) -> std::string_view { return "auto_retry_end"; },
            [](const compaction_start_event&) -> std::string_view { return "compaction_start"; },
            [](const compaction_end_event&) -> std::string_view { return "compaction_end"; },
            [](const extension_error_event&) -> std::string_view { return "extension_error"; },
            [](const retry_fallback_applied_event&) -> std::string_view { return "retry_fallback_applied"; },
            [](const retry_fallback_succeeded_event&) -> std::string_view { return "retry_fallback_succeeded"; },
            [](const agent_settled_event&) -> std::string_view { return "agent_settled"; },
        },
        e);
}

json::object to_json(const event& e) {
    json::object o;
    o["type"] = event_type(e);
    std::visit(overloaded{
                   [](const agent_start_event&) {},
                   [](const turn_start_event&) {},
                   [&](const message_start_event& x) { o["message"] = msg_json(x.message); },
                   [&](const message_update_event& x) {
                       o["message"] = msg_json(x.message);
                       json::object d;
                       d["type"] = "text_delta";
                       d["delta"] = x.delta;
                       o["assistantMessageEvent"] = std::move(d);
                   },
                   [&](const message_end_event& x) { o["message"] = msg_json(x.message); },
                   [&](const tool_execution_start_event& x) {
                       o["toolCallId"] = x.tool_call_id;
                       o["toolName"] = x.tool_name;
                       o["args"] = x.args;
                   },
                   [&](const tool_execution_end_event& x) {
                       o["toolCallId"] = x.tool_call_id;
                       o["toolName"] = x.tool_name;
                       o["result"] = x.result;
                       o["isError"] = x.is_error;
                   },
                   [&](const turn_end_event& x) {
                       o["message"] = msg_json(x.message);
                       json::array tr;
                       for (const auto& m : x.tool_results) tr.push_back(msg_json(m));
                       o["toolResults"] = std::move(tr);
                   },
                   [&](const agent_end_event& x) {
                       json::array ms;
                       for (const auto& m : x.messages) ms.push_back(msg_json(m));
                       o["messages"] = std::move(ms);
                       o["willRetry"] = x.will_retry;
                   },
                   [&](const auto_retry_start_event& x) {
                       o["attempt"] = x.attempt;
                       o["maxAttempts"] = x.max_attempts;
                       o["delayMs"] = x.delay_ms;
                       o["errorMessage"] = x.error_message;
                   },
                   [&](const auto_retry_end_event& x) {
                       o["success"] = x.success;
                       o["attempt"] = x.attempt;
                       if (x.final_error) o["finalError"] = *x.final_error;
                   },
                   [&](const compaction_start_event& x) { o["reason"] = x.reason; },
                   [&](const compaction_end_event& x) {
                       o["reason"] = x.reason;
                       if (x.result) o["result"] = *x.result;
                       o["aborted"] = x.aborted;
                       o["willRetry"] = x.will_retry;
                       if (x.error_message) o["errorMessage"] = *x.error_message;
                   },
                   [&](const extension_error_event& x) {
                       o["extensionPath"] = x.extension_path;
                       o["event"] = x.event;
                       o["error"] = x.error;
                   },
                   [&](const retry_fallback_applied_event& x) {
                       o["from"] = x.from;
                       o["to"] = x.to;
                       o["role"] = x.role;
                   },
                   [&](const retry_fallback_succeeded_event& x) {
                       o["model"] = x.model;
                       o["role"] = x.role;
                   },
                   [](const agent_settled_event&) {},
               },
               e);
    return o;
}

}  // namespace coagent
