#include <coagent/modes/rpc_mode.hpp>
#include <coagent/modes/rpc_output_queue.hpp>
#include <coagent/modes/rpc_protocol.hpp>
#include <coagent/providers/models_config.hpp>
#include <coagent/runtime/json_input.hpp>

#include "line_writer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <unistd.h>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <system_error>
#include <variant>

namespace coagent {

namespace asio = boost::asio;

namespace {

// The output queue's bounds; COAGENT_RPC_OUTPUT_BOUNDS="<merge>,<pause>" (bytes) is a test aid
// (docs/rpc.md "Output").
rpc::output_queue::limits output_limits() {
    rpc::output_queue::limits l;
    const char* v = std::getenv("COAGENT_RPC_OUTPUT_BOUNDS");
    if (!v) return l;
    char* end = nullptr;
    const unsigned long long merge = std::strtoull(v, &end, 10);
    if (end == v || *end != ',') return l;
    const char* rest = end + 1;
    const unsigned long long pause = std::strtoull(rest, &end, 10);
    if (end == rest || *end != '\0') return l;
    l.merge_above = static_cast<std::size_t>(merge);
    l.pause_above = static_cast<std::size_t>(pause);
    return l;
}

std::string trimmed(std::string_view s) {
    const auto blank = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    };
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return std::string(s);
}

bool blank_line(std::string_view s) noexcept {
    for (char c : s)
        if (c != ' ' && c != '\t') return false;
    return true;
}

class rpc_server {
  public:
    explicit rpc_server(app_context& app)
        : app_(app),
          io_(app.io()),
          in_(io_),
          out_fd_(io_),
          signals_(io_, SIGINT, SIGTERM),
          log_(std::make_shared<spdlog::logger>(
              "coagent-rpc", std::make_shared<spdlog::sinks::stderr_sink_mt>())) {}

    rpc_server(const rpc_server&) = delete;
    rpc_server& operator=(const rpc_server&) = delete;

    int run() {
        std::shared_ptr<agent_session> s = app_.make_session(true);  // config_error → exit 2
        attach(std::move(s));

        const int out_fd = ::dup(STDOUT_FILENO);
        if (out_fd < 0) throw std::system_error(errno, std::generic_category(), "rpc mode: stdout");
        out_fd_.assign(out_fd);
        json::object ready;
        ready["type"] = "ready";
        write_line(rpc::to_line(ready));

        arm_signals();
        // a continued session whose last park is open re-enters it: its events come without a
        // prompt command (docs/rpc.md "Parked prompts")
        if (session_->open_park_in_history()) launch_resume_park();
        const int in_fd = ::dup(STDIN_FILENO);
        if (in_fd < 0) {
            log_->warn("rpc mode: no stdin ({}); shutting down", std::strerror(errno));
            begin_shutdown(0);
        } else {
            in_.assign(in_fd);
            asio::co_spawn(io_, read_loop(), [this](std::exception_ptr e) {
                if (e) log_exception("stdin reader", e);
                begin_shutdown(exit_code_);
            });
        }
        io_.run();
        sub_.reset();
        return exit_code_;
    }

  private:
    // ---- session ------------------------------------------------------------------------

    void attach(std::shared_ptr<agent_session> s) {
        sub_.reset();
        session_ = std::move(s);
        sub_ = session_->subscribe([this](const event& e) {
            if (const auto* end = std::get_if<compaction_end_event>(&e);
                end && end->reason == "manual")
                last_manual_compaction_ = *end;  // the compact command's result
            write_event(e);
        });
    }

    /// Busy for a prompt: streaming, in a retry backoff, or a prompt accepted that has not
    /// started yet (so two prompts in one read are not both accepted).
    bool busy() const noexcept { return session_->is_busy() || launching_ > 0; }

    void launch_prompt(std::string text, std::vector<image_block> images, streaming_behavior b) {
        ++launching_;
        ++tasks_;
        asio::co_spawn(io_, run_prompt(session_, std::move(text), std::move(images), b),
                       [this](std::exception_ptr e) {
                           --tasks_;
                           if (e) log_exception("prompt", e);
                           maybe_finish();
                       });
    }

    void launch_resume_park() {
        ++tasks_;
        asio::co_spawn(io_, run_resume_park(session_), [this](std::exception_ptr e) {
            --tasks_;
            if (e) log_exception("resuming the park", e);
            maybe_finish();
        });
    }

    static asio::awaitable<void> run_resume_park(std::shared_ptr<agent_session> s) {
        (void)co_await s->resume_park();
    }

    asio::awaitable<void> run_prompt(std::shared_ptr<agent_session> s, std::string text,
                                     std::vector<image_block> images, streaming_behavior b) {
        --launching_;
        if (shutting_down_) co_return;
        // no suspension between the decrement and prompt() marking the session busy
        prompt_result r = co_await s->prompt(std::move(text), std::move(images), b);
        if (r.outcome == prompt_result::status::refused)
            log_->warn("rpc mode: an accepted prompt was refused by the session: {}", r.error);
    }

    /// compact answers when the compaction has ended (after its compaction_end event); other
    /// commands are handled meanwhile (abort cancels it).
    void launch_compact(const rpc::command& c) {
        ++launching_;
        ++tasks_;
        auto done = [this, id = c.id](std::exception_ptr e) {
            --tasks_;
            if (e) {
                log_exception("compact", e);
                respond(rpc::error_response(id, "compact", "compaction failed unexpectedly"));
            }
            maybe_finish();
        };
        asio::co_spawn(io_, run_compact(session_, c.id, c.custom_instructions.value_or("")),
                       std::move(done));
    }

    asio::awaitable<void> run_compact(std::shared_ptr<agent_session> s,
                                      std::optional<json::value> id, std::string instructions) {
        --launching_;
        if (shutting_down_) {
            respond(rpc::error_response(id, "compact", "coagent is shutting down"));
            co_return;
        }
        last_manual_compaction_.reset();
        compact_result r = co_await s->compact(std::move(instructions));
        std::optional<compaction_end_event> end = std::move(last_manual_compaction_);
        last_manual_compaction_.reset();
        if (r.ok && end && end->result) {
            respond(rpc::success_response(id, "compact", *end->result));
            co_return;
        }
        std::string error = r.error.empty() ? std::string("Compaction failed") : r.error;
        if (end && end->error_message) error = *end->error_message;  // the specific reason
        respond(rpc::error_response(id, "compact", error));
    }

    void log_exception(const char* what, const std::exception_ptr& e) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            log_->error("rpc mode: {} failed: {}", what, x.what());
        } catch (...) {
            log_->error("rpc mode: {} failed with a non-standard exception", what);
        }
    }

    // ---- input --------------------------------------------------------------------------

    asio::awaitable<void> read_loop() {
        std::vector<char> buf(64 * 1024);
        std::vector<rpc::line_reader::item> items;
        for (;;) {
            while (out_.queue().over_pause() && !shutting_down_ && !out_.stopped()) {
                // docs/rpc.md "Output": stdin is not read while the output queue is full
                input_resume_.expires_at(asio::steady_timer::time_point::max());
                co_await input_resume_.async_wait(asio::as_tuple(asio::use_awaitable));
            }
            if (shutting_down_) co_return;
            auto [ec, n] = co_await in_.async_read_some(asio::buffer(buf),
                                                        asio::as_tuple(asio::use_awaitable));
            if (shutting_down_) co_return;  // a signal: the rest of the input is ignored
            items.clear();
            if (n > 0) reader_.feed(std::string_view(buf.data(), n), items);
            for (auto& it : items) handle_item(it);
            if (ec) {
                if (ec == asio::error::eof) {
                    if (auto last = reader_.finish()) handle_item(*last);
                } else if (ec != asio::error::operation_aborted) {
                    log_->error("rpc mode: reading stdin failed: {}", ec.message());
                }
                begin_shutdown(0);
                co_return;
            }
        }
    }

    void handle_item(const rpc::line_reader::item& it) {
        if (it.type == rpc::line_reader::item::kind::too_long) {
            respond(rpc::error_response(rpc::too_long_error(it.size, reader_.max_line_bytes())));
            return;
        }
        if (blank_line(it.text)) return;  // not a command: no response
        auto parsed = rpc::parse_command(it.text);
        if (auto* err = std::get_if<rpc::command_error>(&parsed)) {
            respond(rpc::error_response(*err));
            return;
        }
        handle_command(std::get<rpc::command>(parsed));
    }

    void respond(const json::object& response) { write_line(rpc::to_line(response)); }

    void ok(const rpc::command& c, std::optional<json::value> data = std::nullopt) {
        respond(rpc::success_response(c.id, rpc::to_string(c.kind), std::move(data)));
    }
    void fail(const rpc::command& c, std::string_view error) {
        respond(rpc::error_response(c.id, rpc::to_string(c.kind), error));
    }

    void handle_command(rpc::command& c) {
        using k = rpc::command_kind;
        if (shutting_down_) {
            fail(c, "coagent is shutting down");
            return;
        }
        try {
            switch (c.kind) {
                case k::prompt: {
                    const auto b = c.behavior;
                    if (busy() && b == streaming_behavior::none) {
                        // during a backoff (not while a request streams) the message joins
                        // the chain and the next attempt goes out at once (issue 26)
                        if (launching_ == 0 && session_->can_join_backoff()) {
                            ok(c);  // the response goes out before the message's events
                            session_->join_backoff(std::move(c.message), std::move(c.images));
                            return;
                        }
                        fail(c, busy_refusal);
                        return;
                    }
                    ok(c);  // the response goes out before the prompt's first event
                    launch_prompt(std::move(c.message), std::move(c.images), b);
                    return;
                }
                case k::steer:
                case k::follow_up:
                    ok(c);
                    launch_prompt(std::move(c.message), std::move(c.images),
                                  c.kind == k::steer ? streaming_behavior::steer
                                                     : streaming_behavior::follow_up);
                    return;
                case k::abort:
                    session_->abort();
                    ok(c);
                    return;
                case k::abort_retry:
                    session_->abort_retry();
                    ok(c);
                    return;
                case k::retry_now:
                    if (session_->retry_now())
                        ok(c);
                    else
                        fail(c, "Nothing to retry now: no backoff is running");
                    return;
                case k::set_auto_retry:
                    session_->set_auto_retry_enabled(c.enabled);
                    persist(c, "retry.enabled");
                    return;
                case k::set_auto_compaction:
                    session_->set_auto_compaction_enabled(c.enabled);
                    persist(c, "compaction.enabled");
                    return;
                case k::compact:
                    launch_compact(c);
                    return;
                case k::get_state:
                    ok(c, state());
                    return;
                case k::get_messages: {
                    json::array ms;
                    for (const auto& m : session_->messages()) ms.push_back(to_json(*m));
                    json::object d;
                    d["messages"] = std::move(ms);
                    ok(c, std::move(d));
                    return;
                }
                case k::get_last_assistant_text: {
                    json::object d;
                    d["text"] = last_assistant_text();
                    ok(c, std::move(d));
                    return;
                }
                case k::new_session:
                    new_session(c);
                    return;
                case k::set_model: {
                    // through the session's catalog: models.json, auth.json, faux
                    if (auto error = session_->set_model(c.provider, c.model_id); !error.empty()) {
                        fail(c, error);
                        return;
                    }
                    ok(c, to_json(session_->model()));
                    return;
                }
                case k::set_thinking_level: {
                    // kept for the session; a model that does not reason ignores it (a note)
                    const std::string note = session_->set_thinking_level(c.level);
                    json::object d;
                    d["level"] = to_string(session_->thinking_level_in_use());
                    if (!note.empty()) d["note"] = note;
                    ok(c, std::move(d));
                    return;
                }
                case k::cycle_thinking_level: {
                    // the reference: null for a model that does not reason, else the next level
                    if (!session_->model().reasoning) {
                        ok(c, json::value(nullptr));
                        return;
                    }
                    const auto next = static_cast<thinking_level>(
                        (static_cast<std::size_t>(session_->configured_thinking_level()) + 1) %
                        std::size(thinking_level_names));
                    session_->set_thinking_level(next);
                    json::object d;
                    d["level"] = to_string(next);
                    ok(c, std::move(d));
                    return;
                }
                case k::get_available_models: {
                    json::array models;
                    if (const auto& catalog = session_->catalog())
                        for (const auto& m : catalog->available()) models.push_back(to_json(m));
                    else
                        models.push_back(to_json(session_->model()));
                    json::object d;
                    d["models"] = std::move(models);
                    ok(c, std::move(d));
                    return;
                }
                case k::get_session_stats:
                    ok(c, stats());
                    return;
                case k::set_session_name: {
                    std::string name = trimmed(c.name);
                    if (name.empty()) {
                        fail(c, "Session name cannot be empty");
                        return;
                    }
                    if (auto ec = session_->set_session_name(std::move(name))) {
                        fail(c, "Session name set, but the session file could not be written: " +
                                    ec.message());
                        return;
                    }
                    ok(c);
                    return;
                }
            }
            fail(c, "Unknown command: " + std::string(rpc::to_string(c.kind)));
        } catch (const std::exception& e) {
            // a bug or an unexpected failure: still exactly one response
            log_->error("rpc mode: {} failed: {}", rpc::to_string(c.kind), e.what());
            fail(c, e.what());
        }
    }

    void persist(const rpc::command& c, std::string_view key) {
        if (const std::string error = app_.override_and_persist(key, c.enabled); !error.empty()) {
            fail(c, std::string(key) + " is now " + (c.enabled ? "true" : "false") +
                        " for this session, but saving it to the global settings failed: " + error);
            return;
        }
        ok(c);
    }

    void new_session(const rpc::command& c) {
        if (busy()) {
            fail(c,
                 "Cannot start a new session while a prompt is running or waiting to retry: send "
                 "abort first, or wait for agent_settled");
            return;
        }
        std::shared_ptr<agent_session> fresh;
        try {
            fresh = app_.make_session(false);
            // the new session keeps the model chosen with set_model
            const model_info m = session_->model();
            if (model_selector(fresh->model()) != model_selector(m))
                if (auto error = fresh->set_model(m.provider, m.id); !error.empty())
                    throw std::runtime_error(error);
        } catch (const std::exception& e) {
            fail(c, e.what());
            return;
        }
        attach(std::move(fresh));  // tasks still finishing keep the old session alive
        json::object d;
        d["cancelled"] = false;
        ok(c, std::move(d));
    }

    json::object state() const {
        const auto& s = *session_;
        json::object d;
        d["model"] = to_json(s.model());
        d["thinkingLevel"] = to_string(s.thinking_level_in_use());
        d["isStreaming"] = s.is_streaming();
        d["isCompacting"] = s.is_compacting();
        d["isRetrying"] = s.is_retrying();
        d["retryAttempt"] = s.retry_attempt();
        if (const auto until = s.parked_until()) d["parkedUntil"] = *until;
        d["autoRetryEnabled"] = s.auto_retry_enabled();
        d["autoCompactionEnabled"] = s.config().compaction.enabled;
        d["sessionId"] = s.session_id();
        if (const auto& f = s.history().file()) d["sessionFile"] = f->string();
        if (session_->session_name()) d["sessionName"] = *session_->session_name();
        d["messageCount"] = s.messages().size();
        d["pendingMessageCount"] = s.pending_message_count();
        d["steeringMode"] = "all";  // every queued steering message joins the next request
        d["followUpMode"] = "one-at-a-time";
        d["limitsStore"] = s.limits()->kind();  // docs/limits.md
        d["limitsConnected"] = s.limits()->connected();
        return d;
    }

    json::value last_assistant_text() const {
        const auto& ms = session_->messages();
        for (auto it = ms.rbegin(); it != ms.rend(); ++it) {
            const message& m = **it;
            if (m.role != message_role::assistant) continue;
            if (m.stop == stop_reason::aborted && m.content.empty()) continue;
            std::string t = trimmed(text_of(m));
            if (t.empty()) return nullptr;
            return json::value(std::move(t));
        }
        return nullptr;
    }

    json::object stats() const {
        const auto& s = *session_;
        std::int64_t users = 0, assistants = 0, tool_calls = 0, tool_results = 0, total = 0;
        token_usage sum;
        double cost = 0;
        for (const auto& m : s.history().messages()) {
            ++total;
            switch (m->role) {
                case message_role::user:
                    ++users;
                    break;
                case message_role::assistant:
                    ++assistants;
                    tool_calls += static_cast<std::int64_t>(tool_calls_of(*m).size());
                    sum.input = saturating_add(sum.input, m->usage.input);
                    sum.output = saturating_add(sum.output, m->usage.output);
                    sum.cache_read = saturating_add(sum.cache_read, m->usage.cache_read);
                    sum.cache_write = saturating_add(sum.cache_write, m->usage.cache_write);
                    cost += m->usage.cost.total;
                    break;
                case message_role::tool_result:
                    ++tool_results;
                    break;
            }
        }
        json::object d;
        if (const auto& f = s.history().file()) d["sessionFile"] = f->string();
        d["sessionId"] = s.session_id();
        d["userMessages"] = users;
        d["assistantMessages"] = assistants;
        d["toolCalls"] = tool_calls;
        d["toolResults"] = tool_results;
        d["totalMessages"] = total;
        json::object tokens;
        tokens["input"] = sum.input;
        tokens["output"] = sum.output;
        tokens["cacheRead"] = sum.cache_read;
        tokens["cacheWrite"] = sum.cache_write;
        tokens["total"] = saturating_add(saturating_add(sum.input, sum.output),
                                         saturating_add(sum.cache_read, sum.cache_write));
        d["tokens"] = std::move(tokens);
        // finite costs can still add up to infinity, which JSON cannot carry
        d["cost"] = std::isfinite(cost) ? cost : std::numeric_limits<double>::max();
        // coagent's additions (issue 22): the retries and what failed attempts wasted
        const session_usage& u = s.usage();
        d["retries"] = u.retries;
        json::object by_limit;
        for (std::size_t i = 1; i < u.retries_by_limit.size(); ++i)
            if (u.retries_by_limit[i] > 0)
                by_limit[to_string(static_cast<limit_kind>(i))] = u.retries_by_limit[i];
        d["retriesByLimit"] = std::move(by_limit);
        json::object wasted;
        wasted["input"] = u.wasted.input;
        wasted["output"] = u.wasted.output;
        wasted["cacheRead"] = u.wasted.cache_read;
        wasted["cacheWrite"] = u.wasted.cache_write;
        wasted["total"] = saturating_add(saturating_add(u.wasted.input, u.wasted.output),
                                         saturating_add(u.wasted.cache_read, u.wasted.cache_write));
        d["wastedTokens"] = std::move(wasted);
        d["wastedCost"] = std::isfinite(u.wasted.cost.total) ? u.wasted.cost.total
                                                             : std::numeric_limits<double>::max();
        d["backoffMs"] = u.backoff_ms;
        return d;
    }

    // ---- output -------------------------------------------------------------------------

    /// An event line, written as text straight into the pending output (no DOM, no copy).
    void write_event(const event& e) {
        if (out_.stopped()) return;
        out_.queue().push_event(e);  // merges message_updates above its bound
        out_.flush_soon();           // with the other events of this handler's run: one write
    }

    void write_line(std::string line) {
        if (out_.stopped()) return;
        out_.queue().push_line(line);
        out_.flush_soon();
    }

    void on_written(boost::system::error_code ec) {
        if (!out_.queue().over_pause()) input_resume_.cancel();  // backpressure over
        if (ec) {
            log_->error("rpc mode: writing stdout failed: {}; shutting down", ec.message());
            // exit 1: the client lost output (a signal's 130 / 143 stays)
            if (exit_code_ == 0) exit_code_ = 1;
            begin_shutdown(1);
            maybe_finish();
            return;
        }
        if (out_.idle()) maybe_finish();
    }

    // ---- shutdown -----------------------------------------------------------------------

    void arm_signals() {
        signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
            if (ec) return;
            const int code = sig == SIGINT ? 130 : 143;
            if (shutting_down_) {  // a second signal: stop now
                log_->warn("rpc mode: second signal, exiting without waiting");
                exit_code_ = code;
                io_.stop();
                return;
            }
            begin_shutdown(code);
            arm_signals();
        });
    }

    /// stdin EOF or a signal: cancel a pending retry, abort the stream, let the prompt end
    /// (its last events are written), flush stdout, stop.
    void begin_shutdown(int code) {
        if (shutting_down_) return;
        shutting_down_ = true;
        exit_code_ = code;
        app_.stop_limits();
        boost::system::error_code ignored;
        in_.close(ignored);
        input_resume_.cancel();
        if (session_ && session_->parked_until()) {
            // a park is not cancelled: it stays open in the session file, and `--continue`
            // re-enters it (docs/rpc.md); the process ends once its output is written
            leave_parked_ = true;
        } else if (session_) {
            session_->abort_retry();
            session_->abort();
        }
        maybe_finish();
    }

    void maybe_finish() {
        if (!shutting_down_ || finished_ || (tasks_ > 0 && !leave_parked_) || !out_.idle()) return;
        finished_ = true;
        signals_.cancel();
        io_.stop();
    }

    static constexpr const char* busy_refusal = agent_session::busy_message;

    app_context& app_;
    asio::io_context& io_;
    std::shared_ptr<agent_session> session_;
    subscription sub_;
    asio::posix::stream_descriptor in_;
    asio::posix::stream_descriptor out_fd_;
    asio::signal_set signals_;
    std::shared_ptr<spdlog::logger> log_;
    rpc::line_reader reader_;

    detail::line_writer<asio::posix::stream_descriptor, rpc::output_queue> out_{
        out_fd_, [this](boost::system::error_code ec) { on_written(ec); }, {}, output_limits()};
    asio::steady_timer input_resume_{io_};  // backpressure: stdin waits while output is queued

    int launching_ = 0;  // prompts accepted whose coroutine has not started yet
    int tasks_ = 0;      // prompt coroutines not finished
    bool shutting_down_ = false;
    bool leave_parked_ = false;  // shutting down while parked: the park stays open
    bool finished_ = false;
    int exit_code_ = 0;
    std::optional<compaction_end_event> last_manual_compaction_;
};

}  // namespace

int run_rpc_mode(app_context& app) {
    if (app.options().stdout_closed) {
        std::cerr << "coagent: rpc mode: stdout is closed (" << std::strerror(EBADF)
                  << "); nowhere to write responses\n";
        return 1;
    }
    std::signal(SIGPIPE, SIG_IGN);  // a closed stdout is a write error, not a kill
    rpc_server server(app);
    return server.run();
}

}  // namespace coagent
