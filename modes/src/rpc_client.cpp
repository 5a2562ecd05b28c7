#include <coagent/modes/rpc_client.hpp>
#include <coagent/modes/rpc_protocol.hpp>

#include "line_writer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/process/args.hpp>
#include <boost/process/async.hpp>
#include <boost/process/async_pipe.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/io.hpp>

#include <sys/wait.h>
#include <csignal>

namespace coagent {

namespace asio = boost::asio;
namespace bp = boost::process;
namespace json = boost::json;
using std::chrono::milliseconds;

namespace {

/// A latch with a deadline: complete() sets `done` and cancels the timer; the waiting
/// coroutine checks `done` first (a cancel after the deadline fired is a no-op).
struct waiter {
    explicit waiter(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    bool done = false;
    std::optional<json::object> response;
    std::optional<rpc_error> error;
    std::uint64_t target = 0;  // wait_for_settled: the settled count that completes it

    void complete() {
        if (done) return;
        done = true;
        timer.cancel();
    }
    void fail(const rpc_error& e) {
        if (done) return;
        error = e;
        complete();
    }
};

/// Waits until `w` completes (returns false) or the timeout passes (returns true). A
/// cancellation of the calling coroutine throws system_error(operation_aborted).
asio::awaitable<bool> await_waiter(std::shared_ptr<waiter> w, milliseconds timeout) {
    if (w->done) co_return false;
    w->timer.expires_after(timeout);
    auto [ec] = co_await w->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (w->done) co_return false;
    if (!ec) co_return true;
    throw boost::system::system_error(ec);
}

std::string excerpt(std::string_view s, std::size_t n = 200) {
    if (s.size() <= n) return std::string(s);
    return std::string(s.substr(0, n)) + "...";
}

void ignore_sigpipe_if_default() {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
        std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

struct rpc_client::impl : std::enable_shared_from_this<impl> {
    impl(asio::io_context& io_, rpc_client_options o)
        : io(io_), opts(o), reader(o.max_line_bytes), grace(io_) {}

    asio::io_context& io;
    rpc_client_options opts;
    std::unique_ptr<bp::async_pipe> in, out, err;
    std::unique_ptr<bp::child> child;
    int child_pid = 0;
    bool started = false;
    bool spawned = false;
    std::optional<rpc_error> ended;  // set: every operation fails with it
    std::optional<int> status;       // exit status once seen
    bool out_eof = false, err_eof = false;
    std::string suspect_reason;  // first sign of death (stdout EOF, write error)
    rpc::line_reader reader;
    asio::steady_timer grace;
    bool grace_armed = false;
    std::string err_tail;

    std::map<std::string, std::shared_ptr<waiter>> pending;  // by request id
    std::vector<std::shared_ptr<waiter>> settle_waiters;
    std::vector<std::shared_ptr<waiter>> exit_waiters;
    std::shared_ptr<waiter> ready_waiter;
    bool ready = false;
    std::uint64_t next_id = 0;
    std::uint64_t settled_seen = 0;
    std::optional<std::uint64_t> settle_mark;  // settled_seen when the last prompt was sent

    struct listener_entry {
        std::uint64_t id;
        event_listener fn;
    };
    std::vector<listener_entry> listeners;
    std::uint64_t next_listener = 1;
    int dispatch_depth = 0;
    bool listeners_dirty = false;

    std::optional<detail::line_writer<bp::async_pipe>> writer;  // the child's stdin

    // ---- spawning (a plain function: no coroutine pitfalls) --------------------------------

    void launch(const std::filesystem::path& exe, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env) {
        ignore_sigpipe_if_default();
        std::vector<std::string> argv{"--mode", "rpc"};
        argv.insert(argv.end(), args.begin(), args.end());
        bp::environment e = boost::this_process::environment();
        for (const auto& [k, v] : env) e[k] = v;
        in = std::make_unique<bp::async_pipe>(io);
        auto on_written = [weak = weak_from_this()](boost::system::error_code ec) {
            if (auto self = weak.lock(); self && ec)
                self->suspect("cannot write to coagent's stdin: " + ec.message());
        };
        writer.emplace(*in, std::move(on_written), weak_from_this());
        out = std::make_unique<bp::async_pipe>(io);
        err = std::make_unique<bp::async_pipe>(io);
        std::weak_ptr<impl> weak = weak_from_this();
        std::function<void(int, const std::error_code&)> on_exit =
            [weak](int, const std::error_code& ec) {
                if (auto self = weak.lock()) self->exited(ec);
            };
        std::error_code ec;
        child = std::make_unique<bp::child>(bp::exe = exe.string(), bp::args = argv,
                                            bp::std_in<*in, bp::std_out> * out, bp::std_err > *err,
                                            e, io, bp::on_exit = on_exit, ec);
        if (ec) {
            ended = rpc_error(rpc_error::reason::spawn_failed, "start",
                              "cannot start " + exe.string() + ": " + ec.message());
            throw *ended;
        }
        spawned = true;
        child_pid = child->id();
        auto self = shared_from_this();
        auto on_out_done = [self](std::exception_ptr x) {
            if (x) self->protocol_failure("reading coagent's stdout failed unexpectedly");
        };
        asio::co_spawn(io, read_stdout(self), std::move(on_out_done));
        auto on_err_done = [self](std::exception_ptr x) {
            if (x) {
                self->err_eof = true;
                self->check_dead();
            }
        };
        asio::co_spawn(io, read_stderr(self), std::move(on_err_done));
    }

    // ---- reading ----------------------------------------------------------------------------

    static asio::awaitable<void> read_stdout(std::shared_ptr<impl> p) {
        std::vector<char> buf(64 * 1024);
        std::vector<rpc::line_reader::item> items;
        for (;;) {
            auto [ec, n] = co_await p->out->async_read_some(asio::buffer(buf),
                                                            asio::as_tuple(asio::use_awaitable));
            items.clear();
            if (n > 0) p->reader.feed(std::string_view(buf.data(), n), items);
            for (auto& it : items) {
                if (p->ended && p->ended->why() == rpc_error::reason::protocol) co_return;
                p->on_item(it);
            }
            if (ec) {
                if (ec == asio::error::eof)
                    if (auto last = p->reader.finish()) p->on_item(*last);
                p->out_eof = true;
                p->suspect(ec == asio::error::eof
                               ? "coagent closed its stdout"
                               : "reading coagent's stdout failed: " + ec.message());
                co_return;
            }
        }
    }

    static asio::awaitable<void> read_stderr(std::shared_ptr<impl> p) {
        std::vector<char> buf(16 * 1024);
        for (;;) {
            auto [ec, n] = co_await p->err->async_read_some(asio::buffer(buf),
                                                            asio::as_tuple(asio::use_awaitable));
            p->err_tail.append(buf.data(), n);
            if (p->err_tail.size() > p->opts.stderr_limit)
                p->err_tail.erase(0, p->err_tail.size() - p->opts.stderr_limit);
            if (ec) {
                p->err_eof = true;
                p->check_dead();
                co_return;
            }
        }
    }

    void on_item(const rpc::line_reader::item& it) {
        if (it.type == rpc::line_reader::item::kind::too_long) {
            protocol_failure("coagent wrote a line of " + std::to_string(it.size) +
                             " bytes, above max_line_bytes (" +
                             std::to_string(reader.max_line_bytes()) + ")");
            return;
        }
        if (it.text.empty()) return;
        boost::system::error_code ec;
        json::value v = json::parse(it.text, ec);
        if (ec || !v.is_object()) {
            protocol_failure("coagent wrote a line that is not a JSON object: " + excerpt(it.text));
            return;
        }
        json::object& o = v.get_object();
        const json::value* type = o.if_contains("type");
        if (!type || !type->is_string()) {
            protocol_failure("coagent wrote an object without a string \"type\": " +
                             excerpt(it.text));
            return;
        }
        const std::string_view t = type->get_string();
        if (t == "response") {
            const json::value* id = o.if_contains("id");
            if (!id || !id->is_string()) return;  // not one of ours (we always send a string id)
            auto f = pending.find(std::string(id->get_string()));
            if (f == pending.end()) return;  // a late answer to a request that timed out
            f->second->response = std::move(o);
            f->second->complete();
            return;
        }
        if (t == "ready") {
            ready = true;
            if (ready_waiter) ready_waiter->complete();
            return;
        }
        dispatch(o);
        if (t == "agent_settled") {
            ++settled_seen;
            for (auto& w : settle_waiters)
                if (settled_seen >= w->target) w->complete();
            std::erase_if(settle_waiters, [](const auto& w) { return w->done; });
        }
    }

    void dispatch(const json::object& o) {
        ++dispatch_depth;
        for (std::size_t i = 0; i < listeners.size(); ++i)  // a listener may add one
            if (listeners[i].fn) listeners[i].fn(o);
        if (--dispatch_depth == 0 && listeners_dirty) {
            std::erase_if(listeners, [](const listener_entry& e) { return !e.fn; });
            listeners_dirty = false;
        }
    }

    void unsubscribe(std::uint64_t id) noexcept {
        for (auto& e : listeners)
            if (e.id == id) {
                e.fn = nullptr;
                listeners_dirty = true;
            }
        if (dispatch_depth == 0 && listeners_dirty) {
            std::erase_if(listeners, [](const listener_entry& e) { return !e.fn; });
            listeners_dirty = false;
        }
    }

    // ---- writing ----------------------------------------------------------------------------

    void send(std::string line) {
        if (writer) writer->write(std::move(line));
    }

    // ---- the end of the child -----------------------------------------------------------

    void exited(const std::error_code& ec) {
        if (status) return;
        const int raw = child ? child->native_exit_code() : -1;
        if (ec || raw < 0)
            status = -1;
        else if (WIFEXITED(raw))
            status = WEXITSTATUS(raw);
        else if (WIFSIGNALED(raw))
            status = 128 + WTERMSIG(raw);
        else
            status = -1;
        raw_status = ec ? -1 : raw;
        for (auto& w : exit_waiters) w->complete();
        exit_waiters.clear();
        suspect("coagent exited");
    }
    int raw_status = -1;

    /// A sign that the child is gone: the session ends once stdout, stderr and the exit were
    /// all seen, or after a short grace period (so the error carries the exit status and the
    /// end of stderr).
    void suspect(std::string why) {
        if (suspect_reason.empty()) suspect_reason = std::move(why);
        if (check_dead() || grace_armed || ended) return;
        grace_armed = true;
        grace.expires_after(milliseconds(1000));
        auto self = shared_from_this();
        grace.async_wait([self](boost::system::error_code) {
            if (!self->ended) self->end(self->death_error());
        });
    }

    bool check_dead() {
        if (ended) return true;
        if (out_eof && err_eof && status) {
            end(death_error());
            return true;
        }
        return false;
    }

    std::string exit_text() const {
        if (!status) return suspect_reason + " (the process is still running)";
        if (raw_status >= 0 && WIFSIGNALED(raw_status))
            return "coagent was killed by signal " + std::to_string(WTERMSIG(raw_status));
        if (*status < 0) return "coagent exited (status unknown)";
        return "coagent exited with code " + std::to_string(*status);
    }

    std::string stderr_excerpt() const {
        if (err_tail.empty()) return "";
        std::string_view t = err_tail;
        while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.remove_suffix(1);
        if (t.size() > 2000) {
            t = t.substr(t.size() - 2000);
            while (!t.empty() && (static_cast<unsigned char>(t.front()) & 0xC0) == 0x80)
                t.remove_prefix(1);
            return "; stderr (end): ..." + std::string(t);
        }
        return "; stderr: " + std::string(t);
    }

    rpc_error death_error() const {
        return rpc_error(rpc_error::reason::process_exited, "", exit_text() + stderr_excerpt());
    }

    void protocol_failure(const std::string& what) {
        if (ended) return;
        end(rpc_error(rpc_error::reason::protocol, "", what));
        kill_now();
    }

    /// Fails every waiting operation with `e`; later operations fail with it too.
    void end(const rpc_error& e) {
        if (ended) return;
        ended = e;
        grace.cancel();
        for (auto& [id, w] : pending) w->fail(e);
        for (auto& w : settle_waiters) w->fail(e);
        settle_waiters.clear();
        if (ready_waiter) ready_waiter->fail(e);
        if (writer) writer->stop();
        boost::system::error_code ignored;
        if (in) in->close(ignored);
    }

    void kill_now() noexcept {
        if (spawned && !status && child_pid > 0) ::kill(child_pid, SIGKILL);
    }

    rpc_error failure_for(const std::string& command) const {
        if (ended) return rpc_error(ended->why(), command, ended->what());
        return rpc_error(rpc_error::reason::not_running, command,
                         "coagent is not running: call start() first");
    }

    // ---- operations -------------------------------------------------------------------------

    /// The command `c` as a request (rpc::to_json, the codec the server parses with).
    static asio::awaitable<json::value> call(std::shared_ptr<impl> p, const rpc::command& c);
    /// A command without fields.
    static asio::awaitable<json::value> call(std::shared_ptr<impl> p, rpc::command_kind k);

    static asio::awaitable<json::value> request(std::shared_ptr<impl> p, json::object cmd,
                                                std::optional<milliseconds> timeout) {
        std::string name = "request";
        if (const auto* t = cmd.if_contains("type"); t && t->is_string())
            name = std::string(t->get_string());
        if (p->ended || !p->spawned || !p->ready) throw p->failure_for(name);
        const std::string id = "req_" + std::to_string(++p->next_id);
        cmd["id"] = id;
        if (name == "prompt" || name == "steer" || name == "follow_up")
            p->settle_mark = p->settled_seen;
        auto w = std::make_shared<waiter>(p->io.get_executor());
        p->pending.emplace(id, w);
        struct unregister {
            impl* p;
            const std::string& id;
            ~unregister() { p->pending.erase(id); }
        } guard{p.get(), id};
        p->send(rpc::to_line(cmd));
        const milliseconds limit = timeout.value_or(p->opts.request_timeout);
        const bool timed_out = co_await await_waiter(w, limit);
        if (w->error) throw rpc_error(w->error->why(), name, w->error->what());
        if (timed_out)
            throw rpc_error(rpc_error::reason::timeout, name,
                            name + ": no response from coagent within " +
                                std::to_string(limit.count()) + " ms");
        json::object& r = *w->response;
        const json::value* success = r.if_contains("success");
        if (success && success->is_bool() && success->get_bool()) {
            if (const json::value* d = r.if_contains("data")) co_return *d;
            co_return json::value(nullptr);
        }
        std::string error = "unknown error";
        if (const json::value* e = r.if_contains("error"); e && e->is_string())
            error = std::string(e->get_string());
        throw rpc_error(rpc_error::reason::command_failed, name, error);
    }
};

// ---- subscription -------------------------------------------------------------------------

rpc_client::subscription& rpc_client::subscription::operator=(subscription&& o) noexcept {
    if (this != &o) {
        reset();
        p_ = std::move(o.p_);
        id_ = o.id_;
        o.p_.reset();
    }
    return *this;
}

void rpc_client::subscription::reset() noexcept {
    if (auto p = p_.lock()) p->unsubscribe(id_);
    p_.reset();
}

// ---- rpc_client ---------------------------------------------------------------------------

rpc_client::rpc_client(asio::io_context& io, rpc_client_options opts)
    : impl_(std::make_shared<impl>(io, opts)) {}

rpc_client::~rpc_client() {
    auto& p = *impl_;
    p.end(rpc_error(rpc_error::reason::not_running, "", "the rpc_client was destroyed"));
    for (auto& w : p.exit_waiters)
        w->fail(rpc_error(rpc_error::reason::not_running, "stop", "the rpc_client was destroyed"));
    p.exit_waiters.clear();
    if (p.spawned && !p.status && p.child) {
        std::error_code ec;
        p.child->terminate(ec);  // SIGKILL and reap: no zombie left behind
        p.status = 128 + SIGKILL;
    }
    boost::system::error_code ignored;
    if (p.out) p.out->close(ignored);
    if (p.err) p.err->close(ignored);
    p.grace.cancel();
    for (auto& l : p.listeners) l.fn = nullptr;
}

asio::awaitable<void> rpc_client::start(std::filesystem::path executable,
                                        std::vector<std::string> args,
                                        std::map<std::string, std::string> env) {
    std::shared_ptr<impl> p = impl_;
    if (p->started)
        throw rpc_error(rpc_error::reason::not_running, "start",
                        "rpc_client::start: already started");
    p->started = true;
    p->launch(executable, args, env);  // throws spawn_failed
    if (p->ready) co_return;
    p->ready_waiter = std::make_shared<waiter>(p->io.get_executor());
    auto w = p->ready_waiter;
    const bool timed_out = co_await await_waiter(w, p->opts.start_timeout);
    p->ready_waiter.reset();
    if (w->error) throw rpc_error(w->error->why(), "start", w->error->what());
    if (timed_out) {
        rpc_error e(rpc_error::reason::timeout, "start",
                    "coagent did not write {\"type\":\"ready\"} within " +
                        std::to_string(p->opts.start_timeout.count()) + " ms" +
                        p->stderr_excerpt());
        p->end(e);
        p->kill_now();
        throw e;
    }
}

asio::awaitable<int> rpc_client::stop() {
    std::shared_ptr<impl> p = impl_;
    if (!p->spawned) co_return -1;
    if (!p->status) {
        p->end(
            rpc_error(rpc_error::reason::not_running, "", "coagent was stopped"));  // closes stdin
        auto w = std::make_shared<waiter>(p->io.get_executor());
        p->exit_waiters.push_back(w);
        bool timed_out = co_await await_waiter(w, p->opts.stop_timeout);
        if (timed_out) {
            p->kill_now();
            timed_out = co_await await_waiter(w, p->opts.stop_timeout);
            if (timed_out)
                throw rpc_error(rpc_error::reason::timeout, "stop",
                                "coagent did not exit after SIGKILL");
        }
        if (w->error) throw rpc_error(w->error->why(), "stop", w->error->what());
    }
    co_return p->status.value_or(-1);
}

void rpc_client::kill() noexcept {
    impl_->kill_now();
}

rpc_client::subscription rpc_client::on_event(event_listener listener) {
    const auto id = impl_->next_listener++;
    impl_->listeners.push_back({id, std::move(listener)});
    return subscription(impl_, id);
}

asio::awaitable<json::value> rpc_client::request(json::object command,
                                                 std::optional<milliseconds> timeout) {
    return impl::request(impl_, std::move(command), timeout);
}

namespace {

rpc::command command_of(rpc::command_kind kind) {
    rpc::command c;
    c.kind = kind;
    return c;
}

}  // namespace

asio::awaitable<json::value> rpc_client::impl::call(std::shared_ptr<impl> p,
                                                    const rpc::command& c) {
    return request(std::move(p), rpc::to_json(c), std::nullopt);
}

asio::awaitable<json::value> rpc_client::impl::call(std::shared_ptr<impl> p, rpc::command_kind k) {
    return call(std::move(p), command_of(k));
}

asio::awaitable<void> rpc_client::prompt(std::string message, streaming_behavior behavior) {
    rpc::command c = command_of(rpc::command_kind::prompt);
    c.message = std::move(message);
    c.behavior = behavior;
    co_await impl::call(impl_, c);
}

asio::awaitable<void> rpc_client::steer(std::string message) {
    rpc::command c = command_of(rpc::command_kind::steer);
    c.message = std::move(message);
    co_await impl::call(impl_, c);
}

asio::awaitable<void> rpc_client::follow_up(std::string message) {
    rpc::command c = command_of(rpc::command_kind::follow_up);
    c.message = std::move(message);
    co_await impl::call(impl_, c);
}

asio::awaitable<void> rpc_client::abort() {
    co_await impl::call(impl_, rpc::command_kind::abort);
}

asio::awaitable<void> rpc_client::abort_retry() {
    co_await impl::call(impl_, rpc::command_kind::abort_retry);
}

asio::awaitable<void> rpc_client::retry_now() {
    co_await impl::call(impl_, rpc::command_kind::retry_now);
}

asio::awaitable<void> rpc_client::set_auto_retry(bool enabled) {
    rpc::command c = command_of(rpc::command_kind::set_auto_retry);
    c.enabled = enabled;
    co_await impl::call(impl_, c);
}

asio::awaitable<void> rpc_client::set_auto_compaction(bool enabled) {
    rpc::command c = command_of(rpc::command_kind::set_auto_compaction);
    c.enabled = enabled;
    co_await impl::call(impl_, c);
}

asio::awaitable<json::value> rpc_client::compact(std::optional<std::string> custom_instructions) {
    rpc::command c = command_of(rpc::command_kind::compact);
    c.custom_instructions = std::move(custom_instructions);
    co_return co_await impl::call(impl_, c);
}

asio::awaitable<json::object> rpc_client::get_state() {
    json::value d = co_await impl::call(impl_, rpc::command_kind::get_state);
    if (!d.is_object())
        throw rpc_error(rpc_error::reason::protocol, "get_state",
                        "get_state: data is not an object");
    co_return std::move(d.get_object());
}

asio::awaitable<json::array> rpc_client::get_messages() {
    json::value d = co_await impl::call(impl_, rpc::command_kind::get_messages);
    const json::value* ms = d.is_object() ? d.get_object().if_contains("messages") : nullptr;
    if (!ms || !ms->is_array())
        throw rpc_error(rpc_error::reason::protocol, "get_messages",
                        "get_messages: data.messages is not an array");
    co_return ms->get_array();
}

asio::awaitable<std::optional<std::string>> rpc_client::get_last_assistant_text() {
    json::value d = co_await impl::call(impl_, rpc::command_kind::get_last_assistant_text);
    const json::value* t = d.is_object() ? d.get_object().if_contains("text") : nullptr;
    if (t && t->is_string()) co_return std::string(t->get_string());
    co_return std::nullopt;
}

asio::awaitable<bool> rpc_client::new_session() {
    json::value d = co_await impl::call(impl_, rpc::command_kind::new_session);
    const json::value* x = d.is_object() ? d.get_object().if_contains("cancelled") : nullptr;
    co_return x && x->is_bool() && x->get_bool();
}

asio::awaitable<json::object> rpc_client::set_model(std::string provider, std::string model_id) {
    rpc::command c = command_of(rpc::command_kind::set_model);
    c.provider = std::move(provider);
    c.model_id = std::move(model_id);
    json::value d = co_await impl::call(impl_, c);
    if (!d.is_object())
        throw rpc_error(rpc_error::reason::protocol, "set_model",
                        "set_model: data is not an object");
    co_return std::move(d.get_object());
}

asio::awaitable<json::array> rpc_client::get_available_models() {
    json::value d = co_await impl::call(impl_, rpc::command_kind::get_available_models);
    const json::value* ms = d.is_object() ? d.get_object().if_contains("models") : nullptr;
    if (!ms || !ms->is_array())
        throw rpc_error(rpc_error::reason::protocol, "get_available_models",
                        "get_available_models: data.models is not an array");
    co_return ms->get_array();
}

asio::awaitable<json::object> rpc_client::get_session_stats() {
    json::value d = co_await impl::call(impl_, rpc::command_kind::get_session_stats);
    if (!d.is_object())
        throw rpc_error(rpc_error::reason::protocol, "get_session_stats",
                        "get_session_stats: data is not an object");
    co_return std::move(d.get_object());
}

asio::awaitable<void> rpc_client::set_session_name(std::string name) {
    rpc::command c = command_of(rpc::command_kind::set_session_name);
    c.name = std::move(name);
    co_await impl::call(impl_, c);
}

asio::awaitable<void> rpc_client::wait_for_settled(std::optional<milliseconds> timeout) {
    std::shared_ptr<impl> p = impl_;
    if (p->ended || !p->spawned) throw p->failure_for("wait_for_settled");
    auto w = std::make_shared<waiter>(p->io.get_executor());
    w->target = (p->settle_mark ? *p->settle_mark : p->settled_seen) + 1;
    if (p->settled_seen >= w->target) co_return;
    p->settle_waiters.push_back(w);
    const milliseconds limit = timeout.value_or(p->opts.settle_timeout);
    bool timed_out = false;
    {
        struct unregister {
            impl* p;
            waiter* w;
            ~unregister() {
                std::erase_if(p->settle_waiters, [this](const auto& x) { return x.get() == w; });
            }
        } guard{p.get(), w.get()};
        timed_out = co_await await_waiter(w, limit);
    }
    if (w->error) throw rpc_error(w->error->why(), "wait_for_settled", w->error->what());
    if (timed_out)
        throw rpc_error(rpc_error::reason::timeout, "wait_for_settled",
                        "no agent_settled event within " + std::to_string(limit.count()) + " ms");
}

std::string rpc_client::get_stderr() const {
    return impl_->err_tail;
}
bool rpc_client::running() const noexcept {
    return impl_->spawned && !impl_->ended;
}
std::optional<int> rpc_client::exit_status() const noexcept {
    return impl_->status;
}
int rpc_client::pid() const noexcept {
    return impl_->child_pid;
}

}  // namespace coagent
