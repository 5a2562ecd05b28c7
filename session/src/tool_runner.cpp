#include <coagent/session/tool_runner.hpp>

#include <spdlog/logger.h>

#include <algorithm>
#include <exception>

namespace coagent {

std::string interrupted_tool_text(std::string_view name) {
    std::string s = "Tool ";
    s += name;
    s += " was interrupted before it finished; it was not run again.";
    return s;
}

bool tool_runner::idempotent(std::string_view name) const noexcept {
    for (const auto& t : fns_)
        if (t.name == name) return t.options.idempotent;
    return false;
}

std::vector<tool_call_repair> plan_tool_call_repair(const std::vector<message_ptr>& context,
                                                    const tool_runner* tools) {
    std::vector<tool_call_repair> out;
    // from the end: the toolResult messages, then the assistant turn they answer
    auto it = context.rbegin();
    while (it != context.rend() && (*it)->role == message_role::tool_result) ++it;
    if (it == context.rend() || (*it)->role != message_role::assistant || is_failed_assistant(**it))
        return out;
    const auto answered = [&](const std::string& id) {
        for (auto r = context.rbegin(); r != it; ++r)
            if ((*r)->tool_call_id == id) return true;
        return false;
    };
    for (const tool_call_block* call : tool_calls_of(**it))
        if (!answered(call->id))
            out.push_back({call, tools != nullptr && tools->idempotent(call->name)});
    return out;
}

boost::asio::awaitable<tool_runner::call_result> tool_runner::call(std::string name,
                                                                   boost::json::object args,
                                                                   spdlog::logger& log) const {
    const auto it =
        std::find_if(fns_.begin(), fns_.end(), [&](const auto& t) { return t.name == name; });
    call_result r;
    if (it == fns_.end()) {
        r.output = {"Tool " + name + " not found", true};
        co_return r;
    }
    std::exception_ptr failure;
    try {
        r.output = co_await it->fn(std::move(args));
    } catch (const std::exception& e) {
        r.output = {e.what(), true};
        r.threw = true;
    } catch (...) {
        failure = std::current_exception();
        r.output = {"tool failed with an unknown exception", true};
        r.threw = true;
    }
    if (failure) log.error("tool {} threw a non-std exception", name);
    co_return r;
}

}  // namespace coagent
