#pragma once
// coagent::rpc_client: runs `coagent --mode rpc` as a child process on the caller's
// io_context (Boost.Process async pipes) and drives it with one awaitable per command,
// event subscription, wait_for_settled() (after the prompt's whole retry chain), per-request
// timeouts, and the child's stderr kept for diagnostics. Protocol: docs/rpc.md.
//
// Threading: every member runs on the io_context given to the constructor (one thread, or
// the caller serialises). All awaitables complete on that io_context's executor.
// Lifetime: the client must be alive when an operation starts; it may be destroyed while
// operations are pending (they then fail with rpc_error(not_running)). Event listeners must
// not destroy the client.
// SIGPIPE: start() sets SIGPIPE to ignored if it is at its default (a write to a child that
// died would otherwise kill the caller); a write error is reported as an rpc_error instead.

#include <coagent/runtime/listener_list.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace coagent {

/// A failed rpc_client operation. what() is the error text: for command_failed exactly the
/// server's `error`; for the others a sentence that says what happened (with the exit status
/// and the end of the child's stderr when the child died).
class rpc_error : public std::runtime_error {
  public:
    enum class reason {
        command_failed,  ///< the server answered success:false
        timeout,         ///< no response / event within the time limit
        process_exited,  ///< the child exited (or closed its stdout)
        protocol,        ///< the child wrote something that is not the protocol
        not_running,     ///< not started, already stopped, or the client was destroyed
        spawn_failed,    ///< the executable could not be started
    };
    rpc_error(reason r, std::string command, const std::string& message)
        : std::runtime_error(message), reason_(r), command_(std::move(command)) {}
    reason why() const noexcept { return reason_; }
    /// The command that failed ("get_state"), "start", "wait_for_settled" or "stop".
    const std::string& command() const noexcept { return command_; }

  private:
    reason reason_;
    std::string command_;
};

struct rpc_client_options {
    std::chrono::milliseconds request_timeout{30000};  ///< per command response
    std::chrono::milliseconds start_timeout{30000};    ///< spawn to {"type":"ready"}
    std::chrono::milliseconds settle_timeout{600000};  ///< wait_for_settled default
    std::chrono::milliseconds stop_timeout{5000};      ///< stop(): EOF to exit, then SIGKILL
    std::size_t max_line_bytes =
        std::size_t{256} * 1024 * 1024;    ///< a longer line is a protocol error
    std::size_t stderr_limit = 64 * 1024;  ///< the child's stderr kept (the last bytes)
};

class rpc_client {
    struct impl;

  public:
    using event_listener = std::function<void(const boost::json::object&)>;

    /// Removes its listener on destruction (RAII). May outlive the client (it then does
    /// nothing): coagent::subscription with a liveness guard (<coagent/runtime/listener_list.hpp>).
    using subscription = coagent::subscription;

    explicit rpc_client(boost::asio::io_context& io, rpc_client_options opts = {});
    /// Kills a child still running (SIGKILL, reaped) and fails pending operations.
    ~rpc_client();
    rpc_client(const rpc_client&) = delete;
    rpc_client& operator=(const rpc_client&) = delete;

    /// Spawns `<executable> --mode rpc <args...>` with the current environment plus `env`
    /// (added or replaced), and completes when the child wrote {"type":"ready"}. Throws
    /// rpc_error: spawn_failed, process_exited (e.g. a configuration error: the exit code and
    /// stderr are in the text), protocol, timeout (start_timeout; the child is killed).
    /// Cancellation: none (use the timeout). Call once per client.
    boost::asio::awaitable<void> start(std::filesystem::path executable,
                                       std::vector<std::string> args = {},
                                       std::map<std::string, std::string> env = {});

    /// Closes the child's stdin (RPC mode then cancels a pending retry, aborts the stream and
    /// exits 0), waits up to stop_timeout, else kills it (SIGKILL). Completes with the exit
    /// status: the exit code, or 128 + signal number. Pending calls fail. Safe to call when
    /// the child already exited (returns its status) or was never started (returns -1).
    boost::asio::awaitable<int> stop();

    /// Sends SIGKILL to the child now (no wait). Pending calls fail once its exit is seen.
    void kill() noexcept;

    /// Every event line of the child (not responses, not `ready`), in order, synchronously as
    /// it is read. Listeners added during a dispatch see the next event.
    [[nodiscard]] subscription on_event(event_listener listener);

    /// Sends one command object (an `id` is added) and completes with the response's `data`
    /// (null when absent). Throws rpc_error (command_failed with the server's error text,
    /// timeout, process_exited, protocol, not_running). Cancellation: terminal / partial /
    /// total through the coroutine's cancellation slot: the wait ends with
    /// boost::system::system_error(operation_aborted); the command may still run.
    boost::asio::awaitable<boost::json::value> request(
        boost::json::object command,
        std::optional<std::chrono::milliseconds> timeout = std::nullopt);

    // One awaitable per command; each completes when the response arrived (see request()).
    boost::asio::awaitable<void> prompt(std::string message,
                                        streaming_behavior behavior = streaming_behavior::none);
    boost::asio::awaitable<void> steer(std::string message);
    boost::asio::awaitable<void> follow_up(std::string message);
    boost::asio::awaitable<void> abort();
    boost::asio::awaitable<void> abort_retry();
    /// Ends the backoff in progress at once (the next attempt starts); throws rpc_error
    /// (command_failed, "Nothing to retry now: no backoff is running") when none is running.
    boost::asio::awaitable<void> retry_now();
    boost::asio::awaitable<void> set_auto_retry(bool enabled);
    boost::asio::awaitable<void> set_auto_compaction(bool enabled);
    boost::asio::awaitable<boost::json::value> compact(
        std::optional<std::string> custom_instructions = std::nullopt);
    boost::asio::awaitable<boost::json::object> get_state();
    boost::asio::awaitable<boost::json::array> get_messages();
    boost::asio::awaitable<std::optional<std::string>> get_last_assistant_text();
    /// Completes with `cancelled`.
    boost::asio::awaitable<bool> new_session();
    /// Completes with the model object.
    boost::asio::awaitable<boost::json::object> set_model(std::string provider,
                                                          std::string model_id);
    boost::asio::awaitable<boost::json::array> get_available_models();
    boost::asio::awaitable<boost::json::object> get_session_stats();
    boost::asio::awaitable<void> set_session_name(std::string name);

    /// Completes at the first `agent_settled` event after the latest prompt / steer /
    /// follow_up request was sent — at once if it already arrived — i.e. after that prompt's
    /// turn, its retry chain and queued follow-ups have ended. With no prompt sent yet: at the
    /// next `agent_settled`. Throws rpc_error timeout (settle_timeout by default) or
    /// process_exited / protocol / not_running. Cancellation as request().
    boost::asio::awaitable<void> wait_for_settled(
        std::optional<std::chrono::milliseconds> timeout = std::nullopt);

    /// The last stderr_limit bytes the child wrote on stderr.
    std::string get_stderr() const;
    /// True from spawn until the exit was seen (or a protocol error ended the session).
    bool running() const noexcept;
    /// The exit status once the exit was seen: the exit code, or 128 + signal number.
    std::optional<int> exit_status() const noexcept;
    /// The child's process id (0 before start()).
    int pid() const noexcept;

  private:
    std::shared_ptr<impl> impl_;
};

}  // namespace coagent
