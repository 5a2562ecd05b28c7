// The child process of rpc_client (see rpc_child.hpp).

#include "rpc_child.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/process/args.hpp>
#include <boost/process/async.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/io.hpp>

#include <sys/wait.h>
#include <csignal>

namespace coagent::detail {

namespace asio = boost::asio;
namespace bp = boost::process;

namespace {

void ignore_sigpipe_if_default() {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
        std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

rpc_child::rpc_child(asio::io_context& io, const rpc_client_options& opts, handlers h)
    : io_(io), opts_(opts), h_(std::move(h)), reader_(opts.max_line_bytes), grace_(io) {}

// ---- spawning (a plain function: no coroutine pitfalls) ------------------------------------

void rpc_child::launch(const std::filesystem::path& exe, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env) {
    ignore_sigpipe_if_default();
    std::vector<std::string> argv{"--mode", "rpc"};
    argv.insert(argv.end(), args.begin(), args.end());
    bp::environment e = boost::this_process::environment();
    for (const auto& [k, v] : env) e[k] = v;
    in_ = std::make_unique<bp::async_pipe>(io_);
    auto on_written = [weak = weak_from_this()](boost::system::error_code ec) {
        if (auto self = weak.lock(); self && ec)
            self->suspect("cannot write to coagent's stdin: " + ec.message());
    };
    writer_.emplace(*in_, std::move(on_written), weak_from_this());
    out_ = std::make_unique<bp::async_pipe>(io_);
    err_ = std::make_unique<bp::async_pipe>(io_);
    std::weak_ptr<rpc_child> weak = weak_from_this();
    std::function<void(int, const std::error_code&)> on_exit = [weak](int,
                                                                      const std::error_code& ec) {
        if (auto self = weak.lock()) self->exited(ec);
    };
    std::error_code ec;
    child_ = std::make_unique<bp::child>(bp::exe = exe.string(), bp::args = argv,
                                         bp::std_in<*in_, bp::std_out> * out_, bp::std_err > *err_,
                                         e, io_, bp::on_exit = on_exit, ec);
    if (ec)
        throw rpc_error(rpc_error::reason::spawn_failed, "start",
                        "cannot start " + exe.string() + ": " + ec.message());
    spawned_ = true;
    pid_ = child_->id();
    auto self = shared_from_this();
    auto on_out_done = [self](std::exception_ptr x) {
        if (x && self->h_.on_stdout_failure) self->h_.on_stdout_failure();
    };
    asio::co_spawn(io_, read_stdout(self), std::move(on_out_done));
    auto on_err_done = [self](std::exception_ptr x) {
        if (x) {
            self->err_eof_ = true;
            self->check_dead();
        }
    };
    asio::co_spawn(io_, read_stderr(self), std::move(on_err_done));
}

// ---- reading ---------------------------------------------------------------------------------

asio::awaitable<void> rpc_child::read_stdout(std::shared_ptr<rpc_child> p) {
    std::vector<char> buf(64 * 1024);
    std::vector<rpc::line_reader::item> items;
    for (;;) {
        auto [ec, n] = co_await p->out_->async_read_some(asio::buffer(buf),
                                                         asio::as_tuple(asio::use_awaitable));
        items.clear();
        if (n > 0) p->reader_.feed(std::string_view(buf.data(), n), items);
        for (auto& it : items) {
            if (p->stop_reading_) co_return;
            p->h_.on_line(it);
        }
        if (ec) {
            if (ec == asio::error::eof)
                if (auto last = p->reader_.finish()) p->h_.on_line(*last);
            p->out_eof_ = true;
            p->suspect(ec == asio::error::eof ? "coagent closed its stdout"
                                              : "reading coagent's stdout failed: " + ec.message());
            co_return;
        }
    }
}

asio::awaitable<void> rpc_child::read_stderr(std::shared_ptr<rpc_child> p) {
    std::vector<char> buf(16 * 1024);
    for (;;) {
        auto [ec, n] = co_await p->err_->async_read_some(asio::buffer(buf),
                                                         asio::as_tuple(asio::use_awaitable));
        p->err_tail_.append(buf.data(), n);
        if (p->err_tail_.size() > p->opts_.stderr_limit)
            p->err_tail_.erase(0, p->err_tail_.size() - p->opts_.stderr_limit);
        if (ec) {
            p->err_eof_ = true;
            p->check_dead();
            co_return;
        }
    }
}

// ---- writing, ending -------------------------------------------------------------------------

void rpc_child::write(std::string line) {
    if (writer_) writer_->write(std::move(line));
}

void rpc_child::finish() {
    finished_ = true;
    grace_.cancel();
    if (writer_) writer_->stop();
    boost::system::error_code ignored;
    if (in_) in_->close(ignored);
}

void rpc_child::kill() noexcept {
    if (spawned_ && !status_ && pid_ > 0) ::kill(pid_, SIGKILL);
}

void rpc_child::destroy() noexcept {
    if (spawned_ && !status_ && child_) {
        std::error_code ec;
        child_->terminate(ec);  // SIGKILL and reap: no zombie left behind
        status_ = 128 + SIGKILL;
    }
    boost::system::error_code ignored;
    if (out_) out_->close(ignored);
    if (err_) err_->close(ignored);
    grace_.cancel();
}

// ---- the end of the child ------------------------------------------------------------------

void rpc_child::exited(const std::error_code& ec) {
    if (status_) return;
    const int raw = child_ ? child_->native_exit_code() : -1;
    if (ec || raw < 0)
        status_ = -1;
    else if (WIFEXITED(raw))
        status_ = WEXITSTATUS(raw);
    else if (WIFSIGNALED(raw))
        status_ = 128 + WTERMSIG(raw);
    else
        status_ = -1;
    raw_status_ = ec ? -1 : raw;
    if (h_.on_exit) h_.on_exit();
    suspect("coagent exited");
}

// A sign that the child is gone: the death is reported once stdout, stderr and the exit were
// all seen, or after a short grace period (so the error carries the exit status and the end of
// stderr).
void rpc_child::suspect(std::string why) {
    if (suspect_reason_.empty()) suspect_reason_ = std::move(why);
    if (check_dead() || grace_armed_ || finished_) return;
    grace_armed_ = true;
    grace_.expires_after(std::chrono::milliseconds(1000));
    auto self = shared_from_this();
    grace_.async_wait([self](boost::system::error_code) {
        if (!self->finished_) self->report_death();
    });
}

bool rpc_child::check_dead() {
    if (finished_) return true;
    if (out_eof_ && err_eof_ && status_) {
        report_death();
        return true;
    }
    return false;
}

void rpc_child::report_death() {
    const rpc_error e(rpc_error::reason::process_exited, "", exit_text() + stderr_excerpt());
    if (h_.on_death) h_.on_death(e);
    finished_ = true;
}

std::string rpc_child::exit_text() const {
    if (!status_) return suspect_reason_ + " (the process is still running)";
    if (raw_status_ >= 0 && WIFSIGNALED(raw_status_))
        return "coagent was killed by signal " + std::to_string(WTERMSIG(raw_status_));
    if (*status_ < 0) return "coagent exited (status unknown)";
    return "coagent exited with code " + std::to_string(*status_);
}

std::string rpc_child::stderr_excerpt() const {
    if (err_tail_.empty()) return "";
    std::string_view t = err_tail_;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.remove_suffix(1);
    if (t.size() > 2000) {
        t = t.substr(t.size() - 2000);
        while (!t.empty() && (static_cast<unsigned char>(t.front()) & 0xC0) == 0x80)
            t.remove_prefix(1);
        return "; stderr (end): ..." + std::string(t);
    }
    return "; stderr: " + std::string(t);
}

}  // namespace coagent::detail
