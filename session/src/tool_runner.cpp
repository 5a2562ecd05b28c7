#include <coagent/session/tool_runner.hpp>

#include <spdlog/logger.h>

#include <algorithm>
#include <exception>

namespace coagent {

boost::asio::awaitable<tool_output> tool_runner::call(std::string name, boost::json::object args,
                                                      spdlog::logger& log) const {
    const auto it =
        std::find_if(fns_.begin(), fns_.end(), [&](const auto& t) { return t.first == name; });
    if (it == fns_.end()) co_return tool_output{"Tool " + name + " not found", true};
    tool_output result;
    std::exception_ptr failure;
    try {
        result = co_await it->second(std::move(args));
    } catch (const std::exception& e) {
        result = {e.what(), true};
    } catch (...) {
        failure = std::current_exception();
        result = {"tool failed with an unknown exception", true};
    }
    if (failure) log.error("tool {} threw a non-std exception", name);
    co_return result;
}

}  // namespace coagent
