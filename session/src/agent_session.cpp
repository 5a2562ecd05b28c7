#include <coagent/retry/backoff.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/session/private_files.hpp>
#include <coagent/session/run_step.hpp>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <stdexcept>

namespace coagent {

namespace asio = boost::asio;

namespace {

std::shared_ptr<spdlog::logger> default_logger() {
    static auto l = std::make_shared<spdlog::logger>(
        "coagent", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    return l;
}

// model_summarizer is stateless: one instance serves every session
std::shared_ptr<compaction_hook> default_summarizer() {
    static const auto s = std::make_shared<model_summarizer>();
    return s;
}

constexpr const char* busy_text = agent_session::busy_message;

// checked before the members that need an executor (the backoff timer) are built
const asio::any_io_executor& require_executor(const asio::any_io_executor& ex) {
    if (!ex) throw std::invalid_argument("agent_session: no executor");
    return ex;
}

}  // namespace

// ---- subscription ----------------------------------------------------------------------

subscription& subscription::operator=(subscription&& o) noexcept {
    if (this != &o) {
        reset();
        s_ = o.s_;
        id_ = o.id_;
        o.s_ = nullptr;
    }
    return *this;
}

void subscription::reset() noexcept {
    if (s_) s_->unsubscribe(id_);
    s_ = nullptr;
}

// ---- stream observer: turns provider progress into events --------------------------------

class agent_session::observer final : public stream_observer {
  public:
    observer(agent_session& s, std::shared_ptr<message> m) : s_(s), m_(std::move(m)) {}
    void on_message_start(const message&) override {
        if (started_) return;
        started_ = true;
        s_.emit(message_start_event{m_});
    }
    void on_text_delta(const message& partial, std::string_view delta) override {
        on_message_start(partial);
        s_.emit(message_update_event{m_, std::string(delta)});
    }
    bool started() const noexcept { return started_; }

  private:
    agent_session& s_;
    message_ptr m_;
    bool started_ = false;
};

struct agent_session::run_outcome {
    std::vector<message_ptr> added;
    message_ptr last_assistant;
};

// ---- construction -----------------------------------------------------------------------

agent_session::agent_session(session_options o)
    : executor_(require_executor(o.executor)),
      provider_(std::move(o.model_provider)),
      config_(o.config),
      clock_(o.clock),
      compaction_(o.compaction ? std::move(o.compaction) : default_summarizer()),
      logger_(o.logger ? std::move(o.logger) : default_logger()),
      backoff_(executor_, clock_) {
    if (!provider_) throw std::invalid_argument("agent_session: no provider");
    if (o.auth || o.models || o.now_ms || !o.system_prompt.empty()) {
        auto& r = rare();
        r.auth = std::move(o.auth);
        r.catalog = std::move(o.models);
        r.now_ms = std::move(o.now_ms);
        r.system_prompt = std::move(o.system_prompt);
    }
    if (o.session_dir)
        if (auto w = readable_session_dir_warning_once(*o.session_dir)) logger_->warn("{}", *w);
    if (o.resume_file) {
        auto loaded = session_history::load(*o.resume_file);
        for (const auto& w : loaded.warnings) logger_->warn("{}", w);
        history_ = std::move(loaded.history);
        messages_ = history_.context();
        for (const auto& e : history_.entries())
            if (e.type == "session_info")
                if (const auto* n = e.raw.if_contains("name"); n && n->is_string())
                    rare().name = std::string(n->get_string());
    } else if (o.session_dir) {
        history_ = session_history::create_file(*o.session_dir, o.cwd);
    }
}

agent_session::~agent_session() = default;

// ---- events -----------------------------------------------------------------------------

subscription agent_session::subscribe(listener l) {
    auto id = next_listener_id_++;
    listeners_.push_back({id, std::move(l)});
    return subscription(this, id);
}

void agent_session::unsubscribe(std::uint64_t id) noexcept {
    for (auto& e : listeners_)
        if (e.id == id) {
            e.fn = nullptr;
            listeners_dirty_ = true;
        }
    if (dispatch_depth_ == 0 && listeners_dirty_) {
        std::erase_if(listeners_, [](const listener_entry& e) { return !e.fn; });
        listeners_dirty_ = false;
    }
}

void agent_session::emit(event e) {
    ++dispatch_depth_;
    if (rare_ && !rare_->extensions.empty())
        rare_->extensions.emit(e, [this](extension_error_event err) {
            event ev{std::move(err)};
            for (std::size_t i = 0; i < listeners_.size(); ++i)
                if (listeners_[i].fn) listeners_[i].fn(ev);
        });
    // index loop: a listener may subscribe (push_back) while we dispatch
    for (std::size_t i = 0; i < listeners_.size(); ++i)
        if (listeners_[i].fn) listeners_[i].fn(e);
    if (--dispatch_depth_ == 0 && listeners_dirty_) {
        std::erase_if(listeners_, [](const listener_entry& x) { return !x.fn; });
        listeners_dirty_ = false;
    }
}

std::error_code agent_session::set_session_name(std::string name) {
    json::object fields;
    fields["name"] = name;
    rare().name = std::move(name);
    return history_.append_entry("session_info", std::move(fields));
}

void agent_session::set_model(std::shared_ptr<provider> p) {
    if (!p) throw std::invalid_argument("agent_session::set_model: no provider");
    if (fallback_) fallback_->reset();
    switch_provider(std::move(p), false);
}

std::string agent_session::set_model(std::string_view provider_name, std::string_view model_id) {
    model_catalog* const catalog = catalog_ptr();
    if (!catalog)
        return "Model not found: " + std::string(provider_name) + "/" + std::string(model_id) +
               " (this session has no model catalog)";
    std::string error;
    auto p = catalog->resolve(provider_name, model_id, error);
    if (!p)
        return error.empty()
                   ? "Model not found: " + std::string(provider_name) + "/" + std::string(model_id)
                   : error;
    set_model(std::move(p));
    return {};
}

void agent_session::switch_provider(std::shared_ptr<provider> p, bool temporary) {
    provider_ = std::move(p);
    const model_info m = provider_->model();
    json::object fields;
    fields["provider"] = m.provider;
    fields["modelId"] = m.id;
    if (temporary) fields["temporary"] = true;  // a fallback (retry.fallbackChains)
    if (auto ec = history_.append_entry("model_change", std::move(fields)))
        logger_->error("session file: cannot write the model_change entry: {}", ec.message());
}

std::optional<retry_fallback_applied_event> agent_session::switch_on_usage_limit(
    agent_end_decision& d, const std::string& provider_name) {
    if (!d.usage_limit) return std::nullopt;
    const auto auth = rare_ && rare_->auth ? rare_->auth : provider_->credentials();
    if (auth &&
        auth->mark_usage_limit_reached(provider_name, history_.session_id(), d.retry_hint_ms)) {
        machine_.usage_switch_succeeded(d);
        return std::nullopt;
    }
    // model fallback, only while the chain goes on and a catalog can name the models
    model_catalog* const catalog = catalog_ptr();
    if (!d.start || !catalog || !config_.retry.fallback) return std::nullopt;
    if (!fallback_) fallback_ = std::make_unique<model_fallback>();
    std::shared_ptr<provider> next;
    const auto usable = [&](std::string_view selector) {
        const auto slash = selector.find('/');
        std::string error;
        next = catalog->resolve(selector.substr(0, slash), selector.substr(slash + 1), error);
        return next != nullptr;
    };
    auto applied = fallback_->on_usage_limit(model_selector(provider_->model()), d.retry_hint_ms,
                                             now_ms(), config_.retry, usable);
    if (!applied) return std::nullopt;
    switch_provider(std::move(next), true);
    machine_.usage_switch_succeeded(d);
    return applied;
}

void agent_session::restore_fallback_primary() {
    model_catalog* const catalog = catalog_ptr();
    if (!fallback_ || !fallback_->active() || !catalog) return;
    const auto primary = fallback_->primary_to_restore(now_ms(), config_.retry);
    if (!primary) return;
    const auto slash = primary->find('/');
    std::string error;
    auto p = catalog->resolve(std::string_view(*primary).substr(0, slash),
                              std::string_view(*primary).substr(slash + 1), error);
    if (!p) {
        logger_->warn("model fallback: cannot switch back to {}: {}", *primary, error);
        return;
    }
    switch_provider(std::move(p), false);
}

void agent_session::register_tool(tool_definition def, tool_function fn) {
    auto& r = rare();
    r.tools.emplace_back(def.name, std::move(fn));
    r.tool_defs.push_back(std::move(def));
}

// ---- context ----------------------------------------------------------------------------

void agent_session::append(message_ptr m) {
    // persisted before any listener sees its message_end
    if (auto ec = history_.append_message(m))
        logger_->error("session file {}: cannot write entry: {}",
                       history_.file() ? history_.file()->string() : "-", ec.message());
    messages_.push_back(std::move(m));
}

void agent_session::drop_trailing_failed_assistant() {
    if (!messages_.empty() && messages_.back()->role == message_role::assistant &&
        is_failed_assistant(*messages_.back()))
        messages_.pop_back();
}

provider_request agent_session::build_request() const {
    provider_request r;
    r.model = provider_->model();
    if (rare_) r.system_prompt = rare_->system_prompt;
    r.messages.reserve(messages_.size());
    for (const auto& m : messages_)
        if (!is_failed_assistant(*m)) r.messages.push_back(m);
    if (rare_) r.tools = rare_->tool_defs;
    r.session_id = history_.session_id();
    return r;
}

// ---- control ----------------------------------------------------------------------------

void agent_session::abort_retry() {
    const bool retried_in_flight = machine_.retried_attempt_in_flight();
    if (machine_.abort_retry())
        backoff_.cancel();
    else if (retried_in_flight)
        abort_
            .request();  // the retried attempt is aborted too (docs/retry-policy.md, chain endings)
}

bool agent_session::retry_now() {
    if (!machine_.retry_now()) return false;
    backoff_.cancel();
    return true;
}

void agent_session::abort() {
    if (!busy_) return;
    user_abort_ = true;
    if (machine_.abort()) backoff_.cancel();  // the retry is cancelled first (policy §5)
    abort_.request();                         // then the stream in flight
    // queued messages are dropped: their prompts complete aborted at the settle, whatever runs
    // before it (a message queued after this call, while the aborted run winds down, still runs)
    prompt_result dropped;
    dropped.outcome = prompt_result::status::aborted;
    dropped.error = "Aborted before it ran";
    for (auto* q : {&steer_queue_, &follow_up_queue_}) {
        for (const auto& m : *q)
            for (auto& w : waiters_)
                if (w.id == m.id) *w.result = dropped;
        q->clear();
    }
}

// ---- the prompt -------------------------------------------------------------------------

asio::awaitable<prompt_result> agent_session::prompt(std::string text,
                                                     streaming_behavior behavior) {
    // through async_prompt: cancelling the awaiting coroutine (e.g. awaitable operators) reaches
    // abort() instead of unwinding the turn half-way
    return async_prompt(std::move(text), behavior, asio::use_awaitable);
}

void agent_session::cancel_prompt(std::uint64_t id) {
    for (auto* q : {&steer_queue_, &follow_up_queue_})
        for (auto it = q->begin(); it != q->end(); ++it)
            if (it->id == id) {  // still queued: only this message goes
                q->erase(it);
                for (auto& w : waiters_)
                    if (w.id == id) {
                        *w.cancelled = true;
                        w.timer->cancel();
                    }
                return;
            }
    if (busy_ && running_id_ == id) abort();
}

namespace {
// a plain function: its prompt_result does not take room in every prompt's frame
prompt_result refused_while_compacting() {
    prompt_result r;
    r.outcome = prompt_result::status::refused;
    r.error = "Compaction in progress: wait for compaction_end, then send the message again.";
    return r;
}
}  // namespace

asio::awaitable<prompt_result> agent_session::run_prompt(std::string text,
                                                         streaming_behavior behavior,
                                                         std::uint64_t id) {
    if (busy_) co_return co_await queue_while_busy(std::move(text), behavior, id);
    if (compacting_) co_return refused_while_compacting();
    busy_ = true;
    running_id_ = id;
    user_abort_ = false;
    machine_.begin_prompt();
    abort_.reset();
    message_ptr pending = std::make_shared<message>(make_user_message(std::move(text)));
    co_return co_await run_until_settled(std::move(pending), id);
}

asio::awaitable<prompt_result> agent_session::run_until_settled(message_ptr pending,
                                                                std::uint64_t id) {
    bool overflow_recovered = false;
    bool retry_cancelled = false;
    bool ran = false;
    // false only for a hand-over after a manual compaction that finds nothing to run (abort() or
    // a cancellation dropped its message): what was queued since still runs below
    bool run = pending || !steer_queue_.empty();
    std::optional<prompt_result> own_result;  // abort() ended this prompt's run, then more ran
    for (;;) {
        message_ptr last;
        if (run) {
            ran = true;
            run_outcome out;
            co_await run_agent(std::move(pending), out);
            last = out.last_assistant;
            pending = nullptr;
            next_step step = finish_run(std::move(out), overflow_recovered);
            if (step.wait) {
                machine_.begin_wait();
                // awaited directly as a deferred operation: no wrapper frame, not even
                // use_awaitable's initiation frame (which would sit in a recycled block of a freed,
                // larger frame)
                const bool elapsed =
                    step.delay_ms <= 0
                        ? co_await post_continue()
                        : !std::get<0>(co_await backoff_.async_wait(
                              delay_to_duration(step.delay_ms), asio::as_tuple(asio::deferred)));
                if (resume_after_wait(elapsed)) continue;  // the continue runs as a fresh task
                retry_cancelled = true;
            } else if (step.retry_cancelled) {
                retry_cancelled = true;  // abort_retry() while a retried attempt streamed
            } else if (step.compact) {
                const bool overflow = step.reason == compaction_reason::overflow;
                if (overflow) overflow_recovered = true;
                // an overflowed (failed) reply is dropped and the turn continues once compacted
                const bool resume = overflow && last && is_failed_assistant(*last);
                if (co_await compact_context(step.reason, {}, resume) && resume) continue;
            }
        }
        // queued follow-ups (and steering messages no turn picked up) run before settling.
        // abort() dropped those queued before it, so after an abort() these were queued while
        // the aborted run wound down: they run too, and the aborted prompt still completes
        // aborted. abort_retry() cancels only the retry.
        if (!follow_up_queue_.empty() || !steer_queue_.empty()) {
            if (user_abort_) {
                prompt_result aborted = result_of(last, retry_cancelled);
                if (running_id_ == id) {
                    own_result = std::move(aborted);
                } else {
                    for (auto& w : waiters_)
                        if (w.id == running_id_) *w.result = aborted;
                }
                user_abort_ = false;  // the next run is not aborted
            }
            if (!follow_up_queue_.empty()) {
                pending = std::move(follow_up_queue_.front().msg);
                running_id_ = follow_up_queue_.front().id;
                follow_up_queue_.erase(follow_up_queue_.begin());
            }
            machine_.begin_prompt();
            abort_.reset();  // an abort of the retried stream is not the follow-up's
            overflow_recovered = false;
            retry_cancelled = false;
            run = true;
            continue;
        }
        if (ran) last_result_ = result_of(last, retry_cancelled);
        break;
    }
    busy_ = false;
    for (auto& w : waiters_) w.timer->cancel();  // wakes the prompts queued while busy
    waiters_.clear();
    emit(agent_settled_event{});
    co_return own_result ? std::move(*own_result) : last_result_;
}

asio::awaitable<prompt_result> agent_session::queue_while_busy(std::string text,
                                                               streaming_behavior behavior,
                                                               std::uint64_t id) {
    prompt_result r;
    if (behavior == streaming_behavior::none) {
        r.outcome = prompt_result::status::refused;
        r.error = busy_text;
        co_return r;
    }
    auto m = std::make_shared<message>(make_user_message(std::move(text)));
    (behavior == streaming_behavior::steer ? steer_queue_ : follow_up_queue_)
        .push_back({std::move(m), id});
    // a latch: the timer never fires; settle (or cancelling this prompt) cancels it
    asio::steady_timer latch(executor_, asio::steady_timer::time_point::max());
    bool cancelled = false;
    bool run_now = false;  // a manual compaction ended: this prompt runs the queue and settles
    std::optional<prompt_result> own_result;  // abort() ended this follow-up's run, then more ran
    waiters_.push_back({id, &latch, &cancelled, &own_result, &run_now});
    boost::system::error_code ec;
    co_await latch.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::erase_if(waiters_, [&](const waiter& w) { return w.timer == &latch; });
    if (run_now) {
        // as after a prompt: the queued messages run (this one first), then agent_settled. Its
        // own message may be gone meanwhile (abort() or a cancellation): the rest still runs.
        running_id_ = id;
        user_abort_ = false;
        machine_.begin_prompt();
        abort_.reset();
        message_ptr mine;
        if (!follow_up_queue_.empty() && follow_up_queue_.front().id == id) {
            mine = std::move(follow_up_queue_.front().msg);
            follow_up_queue_.erase(follow_up_queue_.begin());
        }
        prompt_result ran = co_await run_until_settled(std::move(mine), id);
        if (!cancelled) co_return own_result ? std::move(*own_result) : std::move(ran);
    }
    if (cancelled) {
        r.outcome = prompt_result::status::aborted;
        r.error = "Cancelled before it ran";
        co_return r;
    }
    co_return own_result ? std::move(*own_result) : last_result_;
}

asio::awaitable<bool> agent_session::post_continue() {
    co_await asio::post(executor_, asio::use_awaitable);
    co_return true;
}

agent_session::next_step agent_session::finish_run(run_outcome out, bool overflow_recovered) {
    const message* last = out.last_assistant.get();
    classification c;
    if (last) c = classify(*last, provider_->model(), now_ms());
    agent_end_decision d = machine_.on_agent_end(last, c, config_.retry);
    const auto fallback = switch_on_usage_limit(d, last ? last->provider : std::string());
    if (!d.will_retry && fallback_) fallback_->chain_over();

    emit(agent_end_event{std::move(out.added), d.will_retry});
    next_step step;
    if (d.end) {
        step.retry_cancelled = d.end->final_error == retry_cancelled_text;
        emit(*d.end);
    }
    if (fallback) emit(*fallback);
    after_run_input in;
    in.will_retry = d.will_retry;
    in.chain_ended = d.end.has_value();
    in.to_compaction = d.to_compaction;
    in.compaction_enabled = config_.compaction.enabled;
    in.overflow_recovered = overflow_recovered;
    in.abort_requested = abort_.requested();
    in.over_threshold = !d.will_retry && !d.to_compaction && last &&
                        over_threshold(*last, provider_->model(), config_.compaction);
    switch (decide_after_run(in)) {
        case after_run::wait:
            step.wait = true;
            step.delay_ms = d.start->delay_ms;
            emit(*d.start);
            drop_trailing_failed_assistant();  // after the start event (§3 step 9)
            break;
        case after_run::compact_overflow:
            step.compact = true;
            step.reason = compaction_reason::overflow;
            break;
        case after_run::overflow_not_recovered: {
            // one overflow recovery per user prompt (the reference's rule)
            compaction_end_event e;
            e.reason = "overflow";
            e.error_message =
                "Context overflow recovery failed after one compact-and-retry attempt. Try "
                "reducing "
                "the context (start a new session) or switching to a model with a larger context "
                "window.";
            emit(std::move(e));
            break;
        }
        case after_run::compact_threshold:
            step.compact = true;
            step.reason = compaction_reason::threshold;
            break;
        case after_run::settle:
            break;
    }
    return step;
}

bool agent_session::resume_after_wait(bool elapsed) {
    wait_outcome w = machine_.on_wait_done(elapsed);
    if (w.resume) return true;
    emit(*w.end);
    return false;
}

prompt_result agent_session::result_of(const message_ptr& last, bool retry_cancelled) const {
    prompt_result r;
    r.last_assistant = last;
    if (retry_cancelled) {
        r.outcome = user_abort_ ? prompt_result::status::aborted : prompt_result::status::failed;
        r.error = retry_cancelled_text;
        return r;
    }
    if (!last) return r;
    // abort() ended the run: in a failed reply, or between a tool call and the next turn.
    // (abort_.requested() alone is not enough: abort_retry() also aborts a retried attempt in
    // flight, e.g. the overflow compaction's summary request; that is a failure.)
    const bool cut_short = is_failed_assistant(*last) || last->stop == stop_reason::tool_use;
    if (last->stop == stop_reason::aborted || (user_abort_ && cut_short)) {
        r.outcome = prompt_result::status::aborted;
        r.error = last->error_message.value_or("Request was aborted");
    } else if (last->stop == stop_reason::error) {
        r.outcome = prompt_result::status::failed;
        r.error = last->error_message.value_or("Unknown error");
    }
    return r;
}

namespace {
std::string_view reason_text(compaction_reason r) {
    switch (r) {
        case compaction_reason::overflow:
            return "overflow";
        case compaction_reason::threshold:
            return "threshold";
        case compaction_reason::manual:
            return "manual";
    }
    return "manual";
}

// How a compaction that produced no summary ends. abort_ is requested by abort() (user_abort)
// and by abort_retry() while a retried summary attempt streams: the latter cancels only the
// retry of the summary request, so the compaction fails; it is not aborted (docs/retry-policy.md,
// chain endings endings table), whatever the hook said.
struct compaction_failure {
    bool aborted = false;
    std::string error;
};
compaction_failure compaction_failure_of(const compaction_outcome& o, bool abort_requested,
                                         bool user_abort) {
    if (user_abort)
        return {true, o.ok || o.error_message.empty() ? "Compaction aborted" : o.error_message};
    if (abort_requested) return {false, std::string("Compaction failed: ") + retry_cancelled_text};
    return {o.aborted, o.error_message};
}

class null_observer final : public stream_observer {
  public:
    void on_message_start(const message&) override {}
    void on_text_delta(const message&, std::string_view) override {}
};
}  // namespace

asio::awaitable<bool> agent_session::compact_context(compaction_reason reason,
                                                     std::string instructions, bool will_continue) {
    compacting_ = true;
    emit(compaction_start_event{std::string(reason_text(reason))});
    compaction_end_event e;
    e.reason = reason_text(reason);

    std::vector<message_ptr> context = messages_;  // nothing changes until the summary is there
    if (reason == compaction_reason::overflow && !context.empty() &&
        is_failed_assistant(*context.back()))
        context.pop_back();
    auto plan = plan_compaction(context, config_.compaction.keep_recent_tokens);
    if (!plan) {
        compacting_ = false;
        e.error_message =
            "Nothing to compact: the conversation is already within compaction.keepRecentTokens (" +
            std::to_string(config_.compaction.keep_recent_tokens) + " tokens)";
        emit(std::move(e));
        co_return false;
    }
    compaction_request req;
    req.reason = e.reason;
    req.model = provider_->model();
    req.custom_instructions = std::move(instructions);
    req.complete = [this](provider_request r) { return complete_with_retry(std::move(r)); };
    const std::size_t first_kept = plan->first_kept;
    const std::int64_t tokens_before = plan->tokens_before;
    req.plan = std::move(*plan);
    compaction_outcome o = co_await compaction_->compact(std::move(req), abort_);
    compacting_ = false;
    if (!o.ok || abort_.requested()) {
        compaction_failure f = compaction_failure_of(o, abort_.requested(), user_abort_);
        e.aborted = f.aborted;
        e.error_message = std::move(f.error);
        emit(std::move(e));
        co_return false;
    }

    // persist, then swap the context in one step
    std::string first_kept_id;
    if (first_kept < context.size())
        for (const auto& entry : history_.entries())
            if (entry.msg == context[first_kept]) first_kept_id = entry.id;
    json::object fields;
    fields["summary"] = o.summary;
    if (first_kept_id.empty())
        fields["firstKeptEntryId"] = nullptr;
    else
        fields["firstKeptEntryId"] = first_kept_id;
    fields["tokensBefore"] = tokens_before;
    json::object result = fields;
    if (auto ec = history_.append_entry("compaction", std::move(fields)))
        logger_->error("session file: cannot write the compaction entry: {}", ec.message());
    std::vector<message_ptr> next;
    next.reserve(context.size() - first_kept + 1);
    next.push_back(std::make_shared<message>(make_user_message(summary_message_text(o.summary))));
    next.insert(next.end(), context.begin() + static_cast<std::ptrdiff_t>(first_kept),
                context.end());
    messages_ = std::move(next);

    e.result = json::value(std::move(result));
    e.will_retry = will_continue;
    emit(std::move(e));
    co_return true;
}

asio::awaitable<message_ptr> agent_session::complete_with_retry(provider_request req) {
    null_observer quiet;
    for (;;) {
        const std::shared_ptr<provider> p = provider_;  // a fallback may switch it
        const model_info model = p->model();
        auto reply = std::make_shared<message>();
        reply->role = message_role::assistant;
        reply->api = model.api;
        reply->provider = model.provider;
        reply->model = model.id;
        reply->timestamp = wall_clock_ms();
        if (abort_.requested()) {
            reply->stop = stop_reason::aborted;
        } else {
            req.model = model;
            co_await p->stream(req, *reply, quiet, abort_);
        }
        if (abort_.requested() && reply->stop != stop_reason::error)
            reply->stop = stop_reason::aborted;
        if (auto e = machine_.on_assistant_message_end(*reply)) {
            if (fallback_)
                if (auto f = fallback_->on_success(model_selector(model))) emit(*f);
            emit(*e);
        }
        const classification c = classify(*reply, model, now_ms());
        agent_end_decision d = machine_.on_agent_end(reply.get(), c, config_.retry);
        const auto fallback = switch_on_usage_limit(d, model.provider);
        if (!d.will_retry && fallback_) fallback_->chain_over();
        if (d.end) emit(*d.end);
        if (fallback) emit(*fallback);
        if (!d.will_retry) co_return reply;
        emit(*d.start);
        machine_.begin_wait();
        const bool elapsed = d.start->delay_ms <= 0
                                 ? co_await post_continue()
                                 : co_await backoff_.wait(delay_to_duration(d.start->delay_ms));
        if (!resume_after_wait(elapsed)) {
            // the summary request's chain was cancelled: that is why it failed
            reply->error_message = retry_cancelled_text;
            co_return reply;
        }
    }
}

asio::awaitable<compact_result> agent_session::compact(std::string custom_instructions) {
    compact_result r;
    if (busy_ || compacting_) {
        r.error = "Agent is busy: compact when the session is idle (after agent_settled).";
        co_return r;
    }
    busy_ = true;
    user_abort_ = false;
    abort_.reset();
    machine_.begin_prompt();
    r.ok =
        co_await compact_context(compaction_reason::manual, std::move(custom_instructions), false);
    if (!r.ok)
        r.error =
            user_abort_ ? "Compaction aborted" : "Compaction failed or had nothing to compact";
    settle_after_compaction();
    co_return r;
}

void agent_session::settle_after_compaction() {
    // prompts queued during a manual compaction run after it exactly as after a prompt
    // (docs/architecture.md "Compaction"): the first queued one takes over, stays busy, runs the
    // queue and settles
    const std::uint64_t next = !follow_up_queue_.empty() ? follow_up_queue_.front().id
                               : !steer_queue_.empty()   ? steer_queue_.front().id
                                                         : 0;
    if (next != 0)
        for (auto& w : waiters_)
            if (w.id == next && !*w.cancelled) {
                *w.run_now = true;
                w.timer->cancel();
                return;
            }
    busy_ = false;
    // prompts queued during it whose messages abort() dropped: they settle now
    bool settle = false;
    for (auto& w : waiters_) {
        settle = settle || !*w.cancelled;
        w.timer->cancel();
    }
    waiters_.clear();
    if (settle) emit(agent_settled_event{});
}

asio::awaitable<void> agent_session::run_agent(message_ptr user, run_outcome& out) {
    restore_fallback_primary();  // before every run: a new prompt, a retry's continue, a follow-up
    emit(agent_start_event{});
    for (;;) {
        emit(turn_start_event{});
        if (user) {
            append(user);
            emit(message_start_event{user});
            emit(message_end_event{user});
            out.added.push_back(std::move(user));
            user = nullptr;
        }
        if (!steer_queue_.empty()) {
            std::vector<queued_message> steered;  // a listener may queue more while we emit
            steered.swap(steer_queue_);
            for (auto& q : steered) {
                append(q.msg);
                emit(message_start_event{q.msg});
                emit(message_end_event{q.msg});
                out.added.push_back(std::move(q.msg));
            }
        }

        auto reply = std::make_shared<message>();
        reply->role = message_role::assistant;
        {
            const auto m = provider_->model();
            reply->api = m.api;
            reply->provider = m.provider;
            reply->model = m.id;
        }
        reply->timestamp = wall_clock_ms();
        const provider_request req = build_request();
        observer obs(*this, reply);
        streaming_ = true;
        if (abort_.requested()) {
            reply->stop = stop_reason::aborted;
            reply->error_message = "Request was aborted";
        } else {
            const std::shared_ptr<provider> p = provider_;  // set_model may switch it meanwhile
            co_await p->stream(req, *reply, obs, abort_);
        }
        streaming_ = false;
        if (abort_.requested() && reply->stop != stop_reason::error) {
            reply->stop = stop_reason::aborted;
            if (!reply->error_message) reply->error_message = "Request was aborted";
        }
        if (!obs.started()) emit(message_start_event{reply});
        append(reply);
        emit(message_end_event{reply});
        if (auto e = machine_.on_assistant_message_end(*reply)) {
            if (fallback_)
                if (auto f = fallback_->on_success(reply->provider + "/" + reply->model)) emit(*f);
            emit(*e);
        }
        out.added.push_back(reply);
        out.last_assistant = reply;

        turn_end_event te;
        te.message = reply;
        const std::size_t tool_start = out.added.size();
        if (reply->stop == stop_reason::tool_use) co_await execute_tools(*reply, out);
        te.tool_results.assign(out.added.begin() + static_cast<std::ptrdiff_t>(tool_start),
                               out.added.end());
        emit(std::move(te));

        if (abort_.requested()) break;
        if (reply->stop == stop_reason::tool_use) continue;
        if (!steer_queue_.empty() && !is_failed_assistant(*reply)) continue;
        break;
    }
}

asio::awaitable<void> agent_session::execute_tools(const message& assistant, run_outcome& out) {
    for (const tool_call_block* call : tool_calls_of(assistant)) {
        emit(tool_execution_start_event{call->id, call->name, call->arguments});
        tool_output result;
        if (abort_.requested()) {
            result = {"Tool execution was aborted", true};
        } else {
            auto& tools = rare().tools;
            auto it = std::find_if(tools.begin(), tools.end(),
                                   [&](const auto& t) { return t.first == call->name; });
            if (it == tools.end()) {
                result = {"Tool " + call->name + " not found", true};
            } else {
                std::exception_ptr failure;
                try {
                    result = co_await it->second(call->arguments);
                } catch (const std::exception& e) {
                    result = {e.what(), true};
                } catch (...) {
                    failure = std::current_exception();
                    result = {"tool failed with an unknown exception", true};
                }
                if (failure) logger_->error("tool {} threw a non-std exception", call->name);
            }
        }
        json::object res;
        json::array content;
        json::object text;
        text["type"] = "text";
        text["text"] = result.text;
        content.push_back(std::move(text));
        res["content"] = std::move(content);
        emit(tool_execution_end_event{call->id, call->name, json::value(std::move(res)),
                                      result.is_error});
        auto tr = std::make_shared<message>(
            make_tool_result(call->id, call->name, std::move(result.text), result.is_error));
        append(tr);
        emit(message_start_event{tr});
        emit(message_end_event{tr});
        out.added.push_back(std::move(tr));
    }
}

}  // namespace coagent
