#include <coagent/modes/rpc_client.hpp>
#include <coagent/modes/rpc_protocol.hpp>

#include "rpc_child.hpp"

#include <coagent/runtime/latch.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <csignal>

namespace coagent {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::milliseconds;

namespace {

/// What a request, start(), stop() or wait_for_settled() waits on: a latch (with the wait's
/// deadline) and what completed it.
struct waiter {
    explicit waiter(const asio::any_io_executor& ex) : wake(ex) {}
    latch wake;
    std::optional<json::object> response;
    std::optional<rpc_error> error;
    std::uint64_t target = 0;  // wait_for_settled: the settled count that completes it

    bool done() const noexcept { return wake.woken(); }
    void complete() noexcept { wake.wake(); }
    void fail(const rpc_error& e) {
        if (done()) return;
        error = e;
        complete();
    }
};

std::string excerpt(std::string_view s, std::size_t n = 200) {
    if (s.size() <= n) return std::string(s);
    return std::string(s.substr(0, n)) + "...";
}

}  // namespace

struct rpc_client::impl : std::enable_shared_from_this<impl> {
    impl(asio::io_context& io_, rpc_client_options o) : io(io_), opts(o) {}

    asio::io_context& io;
    rpc_client_options opts;
    std::shared_ptr<detail::rpc_child> child;  // set by start()
    bool started = false;
    std::optional<rpc_error> ended;  // set: every operation fails with it

    std::map<std::string, std::shared_ptr<waiter>> pending;  // by request id
    std::vector<std::shared_ptr<waiter>> settle_waiters;
    std::vector<std::shared_ptr<waiter>> exit_waiters;
    std::shared_ptr<waiter> ready_waiter;
    bool ready = false;
    std::uint64_t next_id = 0;
    std::uint64_t settled_seen = 0;
    std::optional<std::uint64_t> settle_mark;  // settled_seen when the last prompt was sent

    listener_list<const json::object&> listeners;

    bool spawned() const noexcept { return child && child->spawned(); }
    std::optional<int> status() const noexcept { return child ? child->status() : std::nullopt; }

    // ---- the child (detail::rpc_child supervises it) ---------------------------------------

    void launch(const std::filesystem::path& exe, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env) {
        std::weak_ptr<impl> weak = weak_from_this();
        detail::rpc_child::handlers h;
        h.on_line = [weak](const rpc::line_reader::item& it) {
            if (auto self = weak.lock()) self->on_item(it);
        };
        h.on_stdout_failure = [weak] {
            if (auto self = weak.lock())
                self->protocol_failure("reading coagent's stdout failed unexpectedly");
        };
        h.on_exit = [weak] {
            if (auto self = weak.lock()) {
                for (auto& w : self->exit_waiters) w->complete();
                self->exit_waiters.clear();
            }
        };
        h.on_death = [weak](const rpc_error& e) {
            if (auto self = weak.lock()) self->end(e);
        };
        child = std::make_shared<detail::rpc_child>(io, opts, std::move(h));
        try {
            child->launch(exe, args, env);
        } catch (const rpc_error& e) {
            ended = e;
            throw;
        }
    }

    void send(std::string line) {
        if (child) child->write(std::move(line));
    }

    void kill_now() noexcept {
        if (child) child->kill();
    }

    std::string stderr_excerpt() const { return child ? child->stderr_excerpt() : ""; }

    // ---- reading ----------------------------------------------------------------------------

    void on_item(const rpc::line_reader::item& it) {
        if (it.type == rpc::line_reader::item::kind::too_long) {
            protocol_failure("coagent wrote a line of " + std::to_string(it.size) +
                             " bytes, above max_line_bytes (" +
                             std::to_string(opts.max_line_bytes) + ")");
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
            std::erase_if(settle_waiters, [](const auto& w) { return w->done(); });
        }
    }

    void dispatch(const json::object& o) { listeners.dispatch(o); }

    // ---- the end ------------------------------------------------------------------------

    void protocol_failure(const std::string& what) {
        if (ended) return;
        end(rpc_error(rpc_error::reason::protocol, "", what));
        if (child) child->stop_reading();
        kill_now();
    }

    /// Fails every waiting operation with `e`; later operations fail with it too. The child's
    /// stdin is closed.
    void end(const rpc_error& e) {
        if (ended) return;
        ended = e;
        for (auto& [id, w] : pending) w->fail(e);
        for (auto& w : settle_waiters) w->fail(e);
        settle_waiters.clear();
        if (ready_waiter) ready_waiter->fail(e);
        if (child) child->finish();
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
        if (p->ended || !p->spawned() || !p->ready) throw p->failure_for(name);
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
        const bool timed_out = co_await w->wake.wait_for(limit);
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

// ---- rpc_client ---------------------------------------------------------------------------

rpc_client::rpc_client(asio::io_context& io, rpc_client_options opts)
    : impl_(std::make_shared<impl>(io, opts)) {}

rpc_client::~rpc_client() {
    auto& p = *impl_;
    p.end(rpc_error(rpc_error::reason::not_running, "", "the rpc_client was destroyed"));
    for (auto& w : p.exit_waiters)
        w->fail(rpc_error(rpc_error::reason::not_running, "stop", "the rpc_client was destroyed"));
    p.exit_waiters.clear();
    if (p.child) p.child->destroy();
    p.listeners.clear();
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
    const bool timed_out = co_await w->wake.wait_for(p->opts.start_timeout);
    p->ready_waiter.reset();
    if (w->error) throw rpc_error(w->error->why(), "start", w->error->what());
    if (timed_out) {
        rpc_error e(rpc_error::reason::timeout, "start",
                    "coagent did not write {\"type\":\"ready\"} within " +
                        std::to_string(p->opts.start_timeout.count()) + " ms" +
                        p->stderr_excerpt());
        // killed before its stdin closes: a child that ends at EOF (as `cat` would) must not
        // exit on its own first and report 0
        p->kill_now();
        p->end(e);
        throw e;
    }
}

asio::awaitable<int> rpc_client::stop() {
    std::shared_ptr<impl> p = impl_;
    if (!p->spawned()) co_return -1;
    if (!p->status()) {
        p->end(
            rpc_error(rpc_error::reason::not_running, "", "coagent was stopped"));  // closes stdin
        auto w = std::make_shared<waiter>(p->io.get_executor());
        p->exit_waiters.push_back(w);
        bool timed_out = co_await w->wake.wait_for(p->opts.stop_timeout);
        if (timed_out) {
            p->kill_now();
            timed_out = co_await w->wake.wait_for(p->opts.stop_timeout);
            if (timed_out)
                throw rpc_error(rpc_error::reason::timeout, "stop",
                                "coagent did not exit after SIGKILL");
        }
        if (w->error) throw rpc_error(w->error->why(), "stop", w->error->what());
    }
    co_return p->status().value_or(-1);
}

void rpc_client::kill() noexcept {
    impl_->kill_now();
}

rpc_client::subscription rpc_client::on_event(event_listener listener) {
    // guarded: the subscription may outlive the client (it then does nothing)
    return impl_->listeners.add(std::move(listener), std::weak_ptr<void>(impl_));
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
    if (p->ended || !p->spawned()) throw p->failure_for("wait_for_settled");
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
        timed_out = co_await w->wake.wait_for(limit);
    }
    if (w->error) throw rpc_error(w->error->why(), "wait_for_settled", w->error->what());
    if (timed_out)
        throw rpc_error(rpc_error::reason::timeout, "wait_for_settled",
                        "no agent_settled event within " + std::to_string(limit.count()) + " ms");
}

std::string rpc_client::get_stderr() const {
    return impl_->child ? impl_->child->stderr_tail() : std::string();
}
bool rpc_client::running() const noexcept {
    return impl_->spawned() && !impl_->ended;
}
std::optional<int> rpc_client::exit_status() const noexcept {
    return impl_->status();
}
int rpc_client::pid() const noexcept {
    return impl_->child ? impl_->child->pid() : 0;
}

}  // namespace coagent
