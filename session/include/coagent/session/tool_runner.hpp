#pragma once
// tool_runner: the tools registered on a session, and one call of one of them. A tool that
// throws, or a name no tool has, becomes an error result for the model; nothing here emits
// events (agent_session does, around each call).

#include <coagent/runtime/message.hpp>
#include <coagent/session/provider.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace coagent {

/// The output of a tool call.
struct tool_output {
    std::string text;
    bool is_error = false;
};
using tool_function = std::function<boost::asio::awaitable<tool_output>(boost::json::object args)>;

class tool_runner {
  public:
    void add(tool_definition def, tool_function fn) {
        fns_.emplace_back(def.name, std::move(fn));
        defs_.push_back(std::move(def));
    }
    /// What requests advertise.
    const std::vector<tool_definition>& definitions() const noexcept { return defs_; }

    /// Runs the tool `name` (on the caller's executor). Unknown tools and exceptions are error
    /// results; a non-std exception is also logged to `log`.
    boost::asio::awaitable<tool_output> call(std::string name, boost::json::object args,
                                             spdlog::logger& log) const;

  private:
    std::vector<tool_definition> defs_;
    std::vector<std::pair<std::string, tool_function>> fns_;
};

}  // namespace coagent
