#pragma once
// tool_runner: the tools registered on a session, and one call of one of them. A tool that
// throws, or a name no tool has, becomes an error result for the model; nothing here emits
// events (agent_session does, around each call). Also the plain decision of what to do with
// tool calls a crash left without a result (plan_tool_call_repair).

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

/// How a tool is registered (agent_session::register_tool).
struct tool_options {
    /// Running it twice has the effect of running it once: a call a crash left without a result
    /// runs once more on resume, instead of getting the interrupted result.
    bool idempotent = false;
};

/// The result text of a tool call that was cut short (abort() while it ran, or a crash): "Tool
/// <name> was interrupted before it finished; it was not run again."
std::string interrupted_tool_text(std::string_view name);

class tool_runner {
  public:
    void add(tool_definition def, tool_function fn, tool_options o = {}) {
        fns_.push_back({def.name, std::move(fn), o});
        defs_.push_back(std::move(def));
    }
    /// What requests advertise.
    const std::vector<tool_definition>& definitions() const noexcept { return defs_; }
    /// The tool `name` is registered as idempotent.
    bool idempotent(std::string_view name) const noexcept;

    /// What a call ended with: the tool's output, or (`threw`) the error result made from the
    /// exception that ended it (a cancelled wait, when abort() interrupted it).
    struct call_result {
        tool_output output;
        bool threw = false;
    };
    /// Runs the tool `name` (on the caller's executor). Unknown tools and exceptions are error
    /// results; a non-std exception is also logged to `log`.
    boost::asio::awaitable<call_result> call(std::string name, boost::json::object args,
                                             spdlog::logger& log) const;

  private:
    struct entry {
        std::string name;
        tool_function fn;
        tool_options options;
    };
    std::vector<tool_definition> defs_;
    std::vector<entry> fns_;
};

/// What to do with one tool call that has no result in the context.
struct tool_call_repair {
    const tool_call_block* call = nullptr;
    bool run_again = false;  ///< registered idempotent: run it; else add interrupted_tool_text()
};

/// The tool calls of the context's last assistant turn (a toolUse reply followed only by
/// toolResult messages) that have no toolResult: what a crash while a tool ran leaves behind.
/// A provider refuses such a history, so each gets a result before the next request: the
/// interrupted result, or (registered idempotent in `tools`, which may be null) one more run.
/// Failed replies are never sent, so their calls need nothing. The pointers point into
/// `context`'s messages.
std::vector<tool_call_repair> plan_tool_call_repair(const std::vector<message_ptr>& context,
                                                    const tool_runner* tools);

}  // namespace coagent
