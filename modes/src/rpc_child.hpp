#pragma once
// The child process of rpc_client, private to modes/: `coagent --mode rpc` spawned with three
// pipes (Boost.Process). It reads stdout as lines, keeps the end of stderr, writes lines to
// stdin, and notices the child's death: once stdout EOF, stderr EOF and the exit status were
// all seen, or a grace period after the first sign (stdout closed, a write error, the exit),
// it reports on_death once, with the exit status and the end of stderr. rpc_client keeps the
// protocol (requests, events, waiters).

#include <coagent/modes/rpc_client.hpp>
#include <coagent/modes/rpc_protocol.hpp>

#include "line_writer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/process/async_pipe.hpp>
#include <boost/process/child.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace coagent::detail {

class rpc_child : public std::enable_shared_from_this<rpc_child> {
  public:
    /// Called on the io_context. None may destroy the rpc_child.
    struct handlers {
        std::function<void(const rpc::line_reader::item&)> on_line;  ///< a stdout line
        std::function<void()> on_stdout_failure;         ///< reading stdout threw (a bug)
        std::function<void()> on_exit;                   ///< the exit status is known
        std::function<void(const rpc_error&)> on_death;  ///< once, unless finish() came first
    };

    rpc_child(boost::asio::io_context& io, const rpc_client_options& opts, handlers h);

    /// Spawns `exe --mode rpc args…` with `env` added to this process's environment and starts
    /// reading. Throws rpc_error(spawn_failed).
    void launch(const std::filesystem::path& exe, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env);

    /// Writes `line` (LF-terminated) to the child's stdin.
    void write(std::string line);
    /// The owner is done: no death report from now on, nothing more is written and stdin is
    /// closed (the child sees EOF). Idempotent.
    void finish();
    /// Stops delivering stdout lines (after a protocol failure); the last line at EOF is still
    /// delivered, as before.
    void stop_reading() noexcept { stop_reading_ = true; }
    /// SIGKILL when it is running.
    void kill() noexcept;
    /// The owner is destroyed: SIGKILL and reap when still running (no zombie), close stdout
    /// and stderr, cancel the grace period.
    void destroy() noexcept;

    bool spawned() const noexcept { return spawned_; }
    std::optional<int> status() const noexcept { return status_; }
    int pid() const noexcept { return pid_; }
    const std::string& stderr_tail() const noexcept { return err_tail_; }
    /// "; stderr: …" (the end of it when long), or "" without stderr output.
    std::string stderr_excerpt() const;

  private:
    static boost::asio::awaitable<void> read_stdout(std::shared_ptr<rpc_child> p);
    static boost::asio::awaitable<void> read_stderr(std::shared_ptr<rpc_child> p);
    void exited(const std::error_code& ec);
    void suspect(std::string why);
    bool check_dead();
    std::string exit_text() const;
    void report_death();

    boost::asio::io_context& io_;
    rpc_client_options opts_;
    handlers h_;
    std::unique_ptr<boost::process::async_pipe> in_, out_, err_;
    std::unique_ptr<boost::process::child> child_;
    std::optional<line_writer<boost::process::async_pipe>> writer_;  // the child's stdin
    rpc::line_reader reader_;
    boost::asio::steady_timer grace_;
    int pid_ = 0;
    bool spawned_ = false;
    bool finished_ = false;  // the owner ended: no death report
    bool stop_reading_ = false;
    std::optional<int> status_;  // exit status once seen
    int raw_status_ = -1;
    bool out_eof_ = false, err_eof_ = false;
    bool grace_armed_ = false;
    std::string suspect_reason_;  // first sign of death (stdout EOF, write error)
    std::string err_tail_;
};

}  // namespace coagent::detail
