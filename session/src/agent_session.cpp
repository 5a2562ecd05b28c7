#include <coagent/retry/backoff.hpp>
#include <coagent/runtime/manual_clock.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/session/private_files.hpp>

#include "session_parts.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
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
    void on_thinking_delta(const message& partial, std::string_view delta) override {
        on_message_start(partial);
        s_.emit(message_update_event{m_, std::string(delta), delta_kind::thinking});
    }
    bool started() const noexcept { return started_; }

  private:
    agent_session& s_;
    message_ptr m_;
    bool started_ = false;
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
    if (o.random) policy_.set_random(std::move(o.random));
    if (o.auth || o.models || o.now_ms || !o.system_prompt.empty() || o.limits || o.telemetry) {
        auto& r = rare();
        if (o.telemetry) {
            r.tel = std::make_unique<telemetry_state>();
            r.tel->sink = std::move(o.telemetry);
        }
        r.auth = std::move(o.auth);
        r.limits = std::move(o.limits);
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
        check_tool_calls_ = true;
        for (const auto& e : history_.entries()) {
            if (e.type == "session_info")
                if (const auto* n = e.raw.if_contains("name"); n && n->is_string())
                    rare().name = std::string(n->get_string());
            // the session's last thinking level (the reference writes these entries too)
            if (e.type == "thinking_level_change")
                if (const auto* l = e.raw.if_contains("thinkingLevel"); l && l->is_string())
                    if (auto level = thinking_level_from_string(l->get_string()))
                        config_.selection.thinking = *level;
        }
    } else if (o.session_dir) {
        history_ = session_history::create_file(*o.session_dir, o.cwd);
    }
}

agent_session::~agent_session() {
    // its credentials go back to the pool (§11.31)
    const auto own = rare_ ? rare_->auth : nullptr;
    if (own) own->end_session(history_.session_id());
    if (const auto p = provider_ ? provider_->credentials() : nullptr; p && p != own)
        p->end_session(history_.session_id());
}

agent_session::rare_members& agent_session::rare() {
    if (!rare_) rare_ = std::make_unique<rare_members>();
    return *rare_;
}

std::int64_t agent_session::now_ms() const {
    return rare_ && rare_->now_ms ? rare_->now_ms() : wall_clock_ms();
}

limit_store* agent_session::budget_store() const noexcept {
    if (!config_.budget.enabled) return nullptr;
    return rare_ && rare_->limits ? rare_->limits.get() : process_limit_store().get();
}

const std::shared_ptr<limit_store>& agent_session::limits() const noexcept {
    return rare_ && rare_->limits ? rare_->limits : process_limit_store();
}

model_catalog* agent_session::catalog_ptr() const noexcept {
    return rare_ ? rare_->catalog.get() : nullptr;
}

const std::optional<std::string>& agent_session::session_name() const noexcept {
    static const std::optional<std::string> none;
    return rare_ ? rare_->name : none;
}

const std::shared_ptr<model_catalog>& agent_session::catalog() const noexcept {
    static const std::shared_ptr<model_catalog> none;
    return rare_ ? rare_->catalog : none;
}

void agent_session::add_extension(std::string path, extension_runner::handler h) {
    rare().extensions.add(std::move(path), std::move(h));
}

// ---- events -----------------------------------------------------------------------------

void agent_session::emit(event e) {
    if (rare_ && !rare_->extensions.empty())
        rare_->extensions.emit(e, [this](extension_error_event err) {
            const event ev{std::move(err)};
            listeners_.dispatch(ev);
        });
    listeners_.dispatch(e);
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
    policy_.forget_fallback();
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

bool agent_session::switch_credential(const std::string& provider_name,
                                      std::optional<std::int64_t> hint_ms) {
    const auto auth = rare_ && rare_->auth ? rare_->auth : provider_->credentials();
    const bool switched =
        auth && auth->mark_usage_limit_reached(provider_name, history_.session_id(), hint_ms);
    if (rare_ && rare_->tel)
        rare_->tel->sink->credential_switch(tel_now(), provider_name, switched);
    return switched;
}

std::optional<retry_fallback_applied_event> agent_session::switch_model(
    std::optional<std::int64_t> hint_ms) {
    model_catalog* const catalog = catalog_ptr();
    if (!catalog) return std::nullopt;
    if (!fallback_) {
        fallback_ = std::make_unique<model_fallback>();
        if (const auto& shared = rare_ ? rare_->limits : nullptr)  // §11.30
            fallback_->share([store = shared.get()](std::string_view model) {
                return store->model_cooldown_until(model);
            });
    }
    std::shared_ptr<provider> next;
    const auto usable = [&](std::string_view selector) {
        const auto slash = selector.find('/');
        std::string error;
        next = catalog->resolve(selector.substr(0, slash), selector.substr(slash + 1), error);
        return next != nullptr;
    };
    const std::string current = model_selector(provider_->model());
    const std::int64_t now = now_ms();
    auto applied = fallback_->on_usage_limit(current, hint_ms, now, config_.retry, usable);
    if (const auto& shared = rare_->limits)  // the cooldown, for every session of the store
        if (const std::int64_t until = fallback_->suppressed_until(current); until > now)
            shared->cool_down_model(current, until, now);
    if (applied) {
        switch_provider(std::move(next), true);
        if (rare_->tel) rare_->tel->sink->fallback(tel_now(), applied->from, applied->to);
    }
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

void agent_session::register_tool(tool_definition def, tool_function fn, tool_options o) {
    auto& r = rare();
    r.tools.add(std::move(def), std::move(fn), o);
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

void agent_session::omit_older_images() {
    // the newest image stays; every older one becomes the placeholder text, in copies of its
    // messages (the session file, written already, keeps the originals)
    bool newest_seen = false;
    for (auto it = messages_.rbegin(); it != messages_.rend(); ++it) {
        const message& m = **it;
        if (image_count(m) == 0 || is_failed_assistant(m)) continue;
        auto copy = std::make_shared<message>(m);
        for (auto b = copy->content.rbegin(); b != copy->content.rend(); ++b) {
            if (!std::holds_alternative<image_block>(*b)) continue;
            if (!newest_seen) {
                newest_seen = true;
                continue;
            }
            *b = text_block{std::string(omitted_image_text)};
        }
        *it = std::move(copy);
    }
}

provider_request agent_session::build_request() const {
    provider_request r;
    r.model = provider_->model();
    if (rare_) r.system_prompt = rare_->system_prompt;
    r.messages.reserve(messages_.size());
    for (const auto& m : messages_)
        if (!is_failed_assistant(*m)) r.messages.push_back(m);
    if (rare_) r.tools = rare_->tools.definitions();
    r.session_id = history_.session_id();
    if (r.messages.size() >= 2) {
        if (!fragments_) fragments_ = std::make_unique<wire_fragments>();
        r.fragments = fragments_.get();
    }
    r.thinking = config_.selection.thinking;
    return r;
}

std::string agent_session::set_thinking_level(thinking_level level) {
    if (level != config_.selection.thinking) {
        json::object fields;
        fields["thinkingLevel"] = to_string(level);
        if (auto ec = history_.append_entry("thinking_level_change", std::move(fields)))
            logger_->error("session file: cannot write the thinking_level_change entry: {}",
                           ec.message());
    }
    config_.selection.thinking = level;
    const model_info m = model();
    if (level == thinking_level::off || m.reasoning) return {};
    std::string note = "Model " + m.provider + "/" + m.id +
                       " does not reason (models.json \"reasoning\": false): thinkingLevel \"" +
                       std::string(to_string(level)) + "\" is kept and ignored";
    logger_->warn("{}", note);
    return note;
}

// ---- control ----------------------------------------------------------------------------

void agent_session::abort_retry() {
    const control_effect e = policy_.abort_retry();
    if (e.cancel_wait) backoff_.cancel();
    if (e.abort_stream) abort_.request();
}

bool agent_session::retry_now() {
    if (!policy_.retry_now()) return false;
    backoff_.cancel();
    return true;
}

bool agent_session::join_backoff(std::string text) {
    return join_backoff_message(
        std::make_shared<const message>(make_user_message(std::move(text))));
}

bool agent_session::join_backoff(std::string text, std::vector<image_block> images) {
    return join_backoff_message(
        std::make_shared<const message>(make_user_message(std::move(text), std::move(images))));
}

bool agent_session::join_backoff_message(message_ptr m) {
    if (!busy_ || !policy_.retry_now()) return false;
    append(m);  // after the failed reply left the context (§3.9): the next request has both
    emit(message_start_event{m});
    emit(message_end_event{m});
    backoff_.cancel();
    return true;
}

void agent_session::abort() {
    if (!busy_) return;
    const control_effect e = policy_.abort();
    if (e.cancel_wait) backoff_.cancel();  // the retry is cancelled first (policy §5.3)
    if (e.abort_stream) abort_.request();  // then the stream in flight
    // queued messages are dropped: their prompts complete aborted at the settle, whatever runs
    // before it (a message queued after this call, while the aborted run winds down, still runs)
    prompt_result dropped;
    dropped.outcome = prompt_result::status::aborted;
    dropped.error = "Aborted before it ran";
    queue_.drop_all(dropped);
}

// ---- telemetry and usage accounting --------------------------------------------------------

const session_usage& agent_session::usage() const noexcept {
    static const session_usage none;
    return usage_ ? *usage_ : none;
}

session_usage& agent_session::usage_mut() {
    if (!usage_) usage_ = std::make_unique<session_usage>();
    return *usage_;
}

std::int64_t agent_session::tel_now() const {
    if (clock_ == clock_kind::manual) return manual_clock::now().time_since_epoch().count();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void agent_session::tel_prompt_start() {
    if (!rare_ || !rare_->tel) return;
    auto& t = *rare_->tel;
    t.prompt_open = true;
    t.sink->prompt_start(tel_now());
}

void agent_session::tel_prompt_end() {
    if (!rare_ || !rare_->tel || !rare_->tel->prompt_open) return;
    auto& t = *rare_->tel;
    t.prompt_open = false;
    t.sink->prompt_end(tel_now(), policy_.result().outcome);
}

void agent_session::tel_refused(prompt_result::status outcome) {
    if (!rare_ || !rare_->tel) return;
    const std::int64_t now = tel_now();
    rare_->tel->sink->prompt_start(now);
    rare_->tel->sink->prompt_end(now, outcome);
}

void agent_session::tel_attempt_start(const model_info& m) {
    if (!rare_ || !rare_->tel) return;
    auto& t = *rare_->tel;
    if (t.provider != m.provider) t.provider = m.provider;
    if (t.model != m.id) t.model = m.id;
    const std::int64_t now = tel_now();
    const telemetry_model model{t.provider, t.model};
    if (!t.chat_open) {
        t.chat_open = true;
        t.attempts = 0;
        t.chat_start = now;
        t.sink->chat_start(now, model);
    }
    t.attempt_start = now;
    t.sink->attempt_start(now, model, t.attempts);
}

void agent_session::tel_attempt_end(const message& reply) {
    const bool failed = reply.stop == stop_reason::error || reply.stop == stop_reason::aborted;
    if (failed) {
        token_usage& w = usage_mut().wasted;
        w.input += reply.usage.input;
        w.output += reply.usage.output;
        w.cache_read += reply.usage.cache_read;
        w.cache_write += reply.usage.cache_write;
        w.total_tokens += reply.usage.total_tokens;
        w.cost.input += reply.usage.cost.input;
        w.cost.output += reply.usage.cost.output;
        w.cost.cache_read += reply.usage.cost.cache_read;
        w.cost.cache_write += reply.usage.cost.cache_write;
        w.cost.total += reply.usage.cost.total;
    }
    if (!rare_ || !rare_->tel) return;
    auto& t = *rare_->tel;
    const std::int64_t now = tel_now();
    if (failed) {  // a failed reply ends its run: tel_classified() reports it
        t.end_pending = true;
        t.pending_end = now;
        t.pending_usage = reply.usage;
        return;
    }
    const telemetry_model model{t.provider, t.model};
    t.last_result = "ok";
    t.sink->attempt_end(now, {model, t.attempt_start, t.attempts++, "ok", reply.usage, false});
    t.chat_open = false;
    t.sink->chat_end(now, {model, t.chat_start, true, {}, t.attempts});
}

void agent_session::tel_classified(const message& last, const classification& c) {
    if (!rare_ || !rare_->tel || !rare_->tel->end_pending) return;
    auto& t = *rare_->tel;
    t.end_pending = false;
    if (last.stop == stop_reason::aborted) {
        t.last_result = "aborted";
        t.rule = "none";
    } else {
        t.last_result = c.limit != limit_kind::none ? to_string(c.limit) : "other";
        t.rule = c.rule;
    }
    t.sink->attempt_end(t.pending_end, {{t.provider, t.model},
                                        t.attempt_start,
                                        t.attempts++,
                                        t.last_result,
                                        t.pending_usage,
                                        true});
}

void agent_session::tel_decided(const run_action& a) {
    if (!rare_ || !rare_->tel || !rare_->tel->chat_open) return;
    switch (a.what) {
        case run_action::kind::run:
        case run_action::kind::wait:
        case run_action::kind::switch_credential:
        case run_action::kind::switch_model:
        case run_action::kind::omit_images:
            return;  // the chat goes on: its next attempt follows
        default:
            break;
    }
    auto& t = *rare_->tel;
    t.chat_open = false;
    t.sink->chat_end(tel_now(),
                     {{t.provider, t.model}, t.chat_start, false, t.last_result, t.attempts});
}

void agent_session::tel_retry(const auto_retry_start_event& e) {
    session_usage& u = usage_mut();
    ++u.retries;
    ++u.retries_by_limit[static_cast<std::size_t>(e.limit)];
    if (!rare_ || !rare_->tel) return;
    auto& t = *rare_->tel;
    t.sink->retry(tel_now(), {{t.provider, t.model}, e.attempt, e.delay_ms, t.rule, e.limit});
}

// ---- the prompt -------------------------------------------------------------------------

asio::awaitable<prompt_result> agent_session::prompt(std::string text,
                                                     streaming_behavior behavior) {
    // through async_prompt: cancelling the awaiting coroutine (e.g. awaitable operators) reaches
    // abort() instead of unwinding the turn half-way
    return async_prompt(std::move(text), behavior, asio::use_awaitable);
}

asio::awaitable<prompt_result> agent_session::prompt(std::string text,
                                                     std::vector<image_block> images,
                                                     streaming_behavior behavior) {
    return async_prompt(std::move(text), std::move(images), behavior, asio::use_awaitable);
}

void agent_session::cancel_prompt(std::uint64_t id) {
    if (queue_.cancel(id)) return;  // still queued: only this message goes
    // the running prompt, or one whose message joined its backoff: the chain is aborted
    if (busy_ && (running_id_ == id || queue_.joined(id))) abort();
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

// a prompt's start, when its coroutine (perform) begins: false when the session is busy or
// compacting (the prompt goes to prompt_while_busy); else the busy period begins with `s.first`
bool agent_session::begin_prompt_loop(loop_start& s, run_state& st) {
    if (busy_ || compacting_) return false;
    busy_ = true;
    running_id_ = s.id;
    abort_.reset();
    st.pending = std::move(s.user);
    st.id = s.id;
    tel_prompt_start();
    s.first = policy_.begin_prompt();
    return true;
}

// a prompt while the session is busy or compacting: a coroutine of its own, so that what it keeps
// is not in the frame of every prompt
asio::awaitable<prompt_result> agent_session::prompt_while_busy(message_ptr user,
                                                                streaming_behavior behavior,
                                                                std::uint64_t id) {
    if (busy_) {
        // a message from the user during a backoff joins the chain and retries now
        if (behavior == streaming_behavior::none && join_backoff_message(user))
            co_return co_await wait_for_settle(id);
        co_return co_await queue_while_busy(std::move(user), behavior, id);
    }
    tel_refused(prompt_result::status::refused);
    co_return refused_while_compacting();
}

// the run policy's events, in the order it decides them (agent_session is its event_sink: no
// sink object in any coroutine frame)
void agent_session::operator()(event e) {
    if (const auto* end = std::get_if<auto_retry_end_event>(&e)) record_retry_end(*end);
    if (const auto* r = std::get_if<auto_retry_start_event>(&e)) tel_retry(*r);
    if (const auto* p = std::get_if<retry_parked_event>(&e)) record_park(*p);
    emit(std::move(e));
}

void agent_session::record_retry_end(const auto_retry_end_event& end) {
    // how the chain ended, before its event is published (docs/sessions.md "retry_end"), so a
    // resumed transcript draws it as it was live
    json::object fields;
    fields["success"] = end.success;
    fields["attempt"] = end.attempt;
    if (end.final_error) fields["finalError"] = *end.final_error;
    if (auto ec = history_.append_entry("retry_end", std::move(fields)))
        logger_->error("session file: cannot write the retry_end entry: {}", ec.message());
}

void agent_session::drop_failed_reply(run_state& st) {
    // retry.resumePartial: the next run may continue the failed reply
    if (!st.summary && !messages_.empty() &&
        partial_to_continue(*messages_.back(), provider_->model().api, config_.retry,
                            prefill_rejected(provider_->model())))
        st.continue_from = messages_.back();
    drop_trailing_failed_assistant();
    st.continue_at = messages_.size();
}

park_context agent_session::park_ctx() const {
    return park_context{limits().get(), history_.session_id(), now_ms()};
}

void agent_session::record_park(const retry_parked_event& p) {
    // the park, before its event is published (docs/sessions.md "retry_park"): a session resumed
    // from the file re-enters it until a retry_park_end closes it
    json::object fields;
    fields["until"] = p.until;
    fields["attempt"] = policy_.machine().attempt();
    fields["limit"] = to_string(p.limit);
    fields["errorMessage"] = p.error_message;
    fields["provider"] = provider_->model().provider;
    if (auto ec = history_.append_entry("retry_park", std::move(fields)))
        logger_->error("session file: cannot write the retry_park entry: {}", ec.message());
}

void agent_session::record_park_end(run_action::park_end how) {
    json::object fields;
    fields["outcome"] = how == run_action::park_end::resumed ? "resumed" : "cancelled";
    if (auto ec = history_.append_entry("retry_park_end", std::move(fields)))
        logger_->error("session file: cannot write the retry_park_end entry: {}", ec.message());
}

std::optional<std::int64_t> agent_session::parked_until() const noexcept {
    return policy_.parked_until();
}

std::optional<open_park> agent_session::open_park_in_history() const {
    return find_open_park(history_.entries());
}

asio::awaitable<prompt_result> agent_session::resume_park() {
    // through async_resume_park: cancelling the awaiting coroutine reaches abort(), as a prompt's
    return async_resume_park(asio::use_awaitable);
}

// a resumed park's start: false (refused) when the session is busy or has no open park; else the
// busy period begins parked, with `s.first`
bool agent_session::begin_resumed_park(loop_start& s, run_state& st) {
    const auto park = find_open_park(history_.entries());
    if (busy_ || compacting_ || !park) return false;
    busy_ = true;
    running_id_ = s.id;
    abort_.reset();
    st.id = s.id;
    tel_prompt_start();
    drop_trailing_failed_assistant();  // it left the context when the park began (§3.9)
    st.continue_at = messages_.size();
    s.first = policy_.begin_parked(park->attempt, park->until, park->limit, park->error_message,
                                   park->provider, now_ms(), sink());
    return true;
}

namespace {
prompt_result refused_resume_park(bool busy) {
    prompt_result r;
    r.outcome = prompt_result::status::refused;
    r.error = busy ? "The session is busy" : "The session has no open park";
    return r;
}
}  // namespace

// perform's run: the next action is written to `a` (a run_action returned through co_await would
// take room in perform's frame)
asio::awaitable<void> agent_session::run_step(run_state& st, run_action& a) {
    if (st.summary) {
        a = co_await stream_summary(static_cast<summary_state&>(st));
        co_return;
    }
    run_outcome out;
    message_ptr from = messages_.size() == st.continue_at ? st.continue_from : message_ptr{};
    st.continue_from = nullptr;
    co_await run_agent(std::move(st.pending), out, std::move(from));
    st.pending = nullptr;
    a = end_run(out);
}

asio::awaitable<void> agent_session::compact_step(run_action& a) {
    const bool ok = co_await compact_context(a.reason, {}, a.resume);
    if (rare_ && rare_->tel) rare_->tel->sink->compaction(tel_now(), a.reason, ok);
    a = policy_.on_compaction_done(ok, has_queued());
}

// a wait begins: the failed reply leaves the context (§3.9); a backoff's start for telemetry and
// usage (0 for a park)
std::int64_t agent_session::begin_backoff(const run_action& a, run_state& st) {
    if (a.drop_failed_reply) drop_failed_reply(st);
    if (a.what != run_action::kind::wait) return 0;
    const std::int64_t wait_from = tel_now();
    if (rare_ && rare_->tel) rare_->tel->sink->backoff_start(wait_from);
    return wait_from;
}

run_action agent_session::end_wait(run_action::kind what, bool elapsed, std::int64_t wait_from) {
    if (what == run_action::kind::park) {
        run_action next = policy_.on_park_done(elapsed, has_queued(), park_ctx(), sink());
        if (next.ended_park != run_action::park_end::none) record_park_end(next.ended_park);
        return next;
    }
    if (const std::int64_t waited = (tel_now() - wait_from) / 1'000'000; waited > 0)
        usage_mut().backoff_ms += waited;
    if (rare_ && rare_->tel)
        rare_->tel->sink->backoff_end(tel_now(), (tel_now() - wait_from) / 1'000'000);
    return policy_.on_wait_done(elapsed, has_queued(), sink());
}

asio::awaitable<prompt_result> agent_session::perform(loop_start s) {
    // the frame of a session parked in a backoff: keep its locals few and small (a run's state
    // is in run_step's frame, which is gone while the session waits)
    run_state own;
    run_state& st = s.st ? *s.st : own;
    run_action& a = s.first;
    if (s.what == loop_start::kind::prompt && !begin_prompt_loop(s, st))
        co_return co_await prompt_while_busy(std::move(s.user), s.behavior, s.id);
    if (s.what == loop_start::kind::resume_park && !begin_resumed_park(s, st))
        co_return refused_resume_park(busy_ || compacting_);
    for (bool going = true; going;) {
        switch (a.what) {
            case run_action::kind::run:
                co_await run_step(st, a);
                tel_decided(a);
                break;
            case run_action::kind::switch_credential:
                a = policy_.on_credential_switch(
                    switch_credential(policy_.limit_provider(), a.retry_hint_ms), config_, sink());
                tel_decided(a);
                break;
            case run_action::kind::switch_model:
                a = policy_.on_model_switch(switch_model(a.retry_hint_ms), config_, sink());
                tel_decided(a);
                break;
            case run_action::kind::wait:
            case run_action::kind::park: {
                // a backoff, or (retry.longWait "park") the same cancellable wait to the wake
                const std::int64_t wait_from = begin_backoff(a, st);
                // awaited directly as a deferred operation: no wrapper frame, not even
                // use_awaitable's initiation frame (which would sit in a recycled block of a
                // freed, larger frame)
                const bool elapsed =
                    a.delay_ms <= 0
                        ? co_await post_continue()
                        : !std::get<0>(co_await backoff_.async_wait(
                              delay_to_duration(a.delay_ms), asio::as_tuple(asio::deferred)));
                a = end_wait(a.what, elapsed, wait_from);
                tel_decided(a);
                break;
            }
            case run_action::kind::compact:
                co_await compact_step(a);
                break;
            case run_action::kind::run_queued:
                a = next_queued(st, a.has_result);
                break;
            case run_action::kind::settle:
                settle(a.has_result);
                going = false;
                break;
            case run_action::kind::summary_done:
                going = false;
                break;
            case run_action::kind::omit_images:
                drop_trailing_failed_assistant();
                omit_older_images();
                a = run_action{};
                a.what = run_action::kind::run;
                break;
        }
    }
    if (s.st) co_return prompt_result{};  // the caller's: it takes its own result
    co_return st.own_result ? std::move(*st.own_result) : last_result();
}

bool agent_session::prefill_rejected(const model_info& m) const {
    if (!rare_) return false;
    const auto& r = rare_->prefill_rejected;
    return std::find(r.begin(), r.end(), model_selector(m)) != r.end();
}

run_action agent_session::end_run(run_outcome& out) {
    run_end in;
    in.added = std::move(out.added);
    in.last = std::move(out.last);
    if (in.last) {
        const model_info m = provider_->model();
        in.cls = classify(*in.last, m, now_ms());
        if (out.continued && is_prefill_rejection(*in.last)) {
            // the provider refused the prefill: remembered for the model, and this attempt is
            // retried as a full restart
            if (!prefill_rejected(m)) rare().prefill_rejected.push_back(model_selector(m));
            in.cls = prefill_rejection_classification();
        }
        in.over_threshold = over_threshold(*in.last, m, config_.compaction);
        tel_classified(*in.last, in.cls);
    }
    for (const auto& m : messages_)
        if (!is_failed_assistant(*m)) in.images += static_cast<std::int64_t>(image_count(*m));
    in.abort_requested = abort_.requested();
    in.has_queued = has_queued();
    in.can_fall_back = catalog_ptr() != nullptr;
    in.budget = budget_store();
    in.park = park_ctx();
    return policy_.on_run_end(std::move(in), config_, sink());
}

run_action agent_session::next_queued(run_state& st, bool prompt_over_aborted) {
    if (prompt_over_aborted) {  // abort() ended the prompt that is over
        prompt_result aborted = policy_.result();
        if (running_id_ == st.id)
            st.own_result = std::make_unique<prompt_result>(std::move(aborted));
        else
            queue_.set_result(running_id_, aborted);
    }
    if (auto next = queue_.pop_follow_up()) {
        st.pending = std::move(next->msg);
        running_id_ = next->id;
    }
    abort_.reset();  // an abort of the retried stream is not the follow-up's
    tel_prompt_end();
    tel_prompt_start();
    return policy_.begin_next();
}

void agent_session::settle(bool has_result) {
    if (has_result) {
        if (!last_result_) last_result_ = std::make_unique<prompt_result>();
        *last_result_ = policy_.result();
    }
    busy_ = false;
    tel_prompt_end();
    queue_.wake_all();  // the prompts queued while busy
    emit(agent_settled_event{});
}

asio::awaitable<prompt_result> agent_session::queue_while_busy(message_ptr user,
                                                               streaming_behavior behavior,
                                                               std::uint64_t id) {
    prompt_result r;
    if (behavior == streaming_behavior::none) {
        r.outcome = prompt_result::status::refused;
        r.error = busy_text;
        tel_refused(r.outcome);
        co_return r;
    }
    queue_.push(behavior == streaming_behavior::steer, std::move(user), id);
    // parked until the settle, a hand-over, or a cancellation of this prompt wakes it
    latch wake(executor_);
    bool cancelled = false;
    bool run_now = false;  // a manual compaction ended: this prompt runs the queue and settles
    std::optional<prompt_result> own_result;  // abort() ended this follow-up's run, then more ran
    queue_.park({id, &wake, &cancelled, &own_result, &run_now});
    co_await wake.wait();
    queue_.unpark(&wake);
    if (run_now) {
        // as after a prompt: the queued messages run (this one first), then agent_settled. Its
        // own message may be gone meanwhile (abort() or a cancellation): the rest still runs.
        running_id_ = id;
        abort_.reset();
        run_state st;
        st.id = id;
        st.pending = queue_.pop_follow_up_of(id);
        const run_action first = st.pending || queue_.has_steers()
                                     ? policy_.begin_prompt()
                                     : policy_.begin_handover(has_queued());
        tel_prompt_start();
        co_await perform(loop_start{loop_start::kind::action, {}, 0, {}, &st, first});
        if (!cancelled)
            co_return own_result ? std::move(*own_result)
            : st.own_result      ? std::move(*st.own_result)
                                 : last_result();
    }
    if (cancelled) {
        tel_refused(prompt_result::status::aborted);
        r.outcome = prompt_result::status::aborted;
        r.error = "Cancelled before it ran";
        co_return r;
    }
    co_return own_result ? std::move(*own_result) : last_result();
}

asio::awaitable<prompt_result> agent_session::wait_for_settle(std::uint64_t id) {
    latch wake(executor_);
    bool cancelled = false;  // never set: no queued message of its own
    bool run_now = false;    // never set: a backoff is not a manual compaction
    std::optional<prompt_result> own_result;
    queue_.park({id, &wake, &cancelled, &own_result, &run_now, true});
    co_await wake.wait();
    queue_.unpark(&wake);
    co_return own_result ? std::move(*own_result) : last_result();
}

asio::awaitable<bool> agent_session::post_continue() {
    co_await asio::post(executor_, asio::use_awaitable);
    co_return true;
}

namespace {
class null_observer final : public stream_observer {
  public:
    void on_message_start(const message&) override {}
    void on_text_delta(const message&, std::string_view) override {}
};
}  // namespace

asio::awaitable<message_ptr> agent_session::request_summary(provider_request req) {
    summary_state st;
    st.summary = true;
    st.request = &req;
    co_await perform(loop_start{loop_start::kind::action, {}, 0, {}, &st, policy_.begin_summary()});
    // the summary request's chain was cancelled: that is why it failed
    if (policy_.summary_cancelled()) st.reply->error_message = retry_cancelled_text;
    co_return std::move(st.reply);
}

asio::awaitable<run_action> agent_session::stream_summary(summary_state& st) {
    null_observer quiet;
    const std::shared_ptr<provider> p = provider_;  // a fallback may switch it
    const model_info model = p->model();
    auto reply = std::make_shared<message>();
    reply->role = message_role::assistant;
    reply->api = model.api;
    reply->provider = model.provider;
    reply->model = model.id;
    reply->timestamp = wall_clock_ms();
    bool attempted = false;
    if (abort_.requested()) {
        reply->stop = stop_reason::aborted;
    } else {
        st.request->model = model;
        tel_attempt_start(model);
        co_await p->stream(*st.request, *reply, quiet, abort_);
        attempted = true;
    }
    if (abort_.requested() && reply->stop != stop_reason::error) reply->stop = stop_reason::aborted;
    if (attempted) tel_attempt_end(*reply);
    policy_.on_reply_end(*reply, sink(), budget_store(), config_.budget);
    run_end in;
    in.cls = classify(*reply, model, now_ms());
    in.last = reply;
    tel_classified(*reply, in.cls);
    in.abort_requested = abort_.requested();
    in.can_fall_back = catalog_ptr() != nullptr;
    in.budget = budget_store();
    st.reply = std::move(reply);
    co_return policy_.on_run_end(std::move(in), config_, sink());
}

asio::awaitable<void> agent_session::run_agent(message_ptr user, run_outcome& out,
                                               message_ptr continue_from) {
    restore_fallback_primary();  // before every run: a new prompt, a retry's continue, a follow-up
    emit(agent_start_event{});
    for (;;) {
        emit(turn_start_event{});
        if (check_tool_calls_) co_await repair_tool_calls(out);
        if (user) {
            append(user);
            emit(message_start_event{user});
            emit(message_end_event{user});
            out.added.push_back(std::move(user));
            user = nullptr;
        }
        if (queue_.has_steers()) {
            for (auto& q : queue_.take_steers()) {  // a listener may queue more while we emit
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
        provider_request req = build_request();
        // retry.resumePartial (the first request of the run only): the request ends with the
        // partial text as the assistant's turn, and the reply starts from it (message_start
        // carries it)
        std::optional<std::string> prefill_text;
        if (continue_from)
            prefill_text = partial_to_continue(*continue_from, reply->api, config_.retry,
                                               prefill_rejected(provider_->model()));
        if (prefill_text) {
            auto prefill = std::make_shared<message>();
            prefill->role = message_role::assistant;
            prefill->content.emplace_back(text_block{*prefill_text});
            req.messages.push_back(std::move(prefill));
            reply->content.emplace_back(text_block{std::move(*prefill_text)});
            out.continued = true;
        } else {
            continue_from = nullptr;
        }
        observer obs(*this, reply);
        bool attempted = false;
        streaming_ = true;
        if (abort_.requested()) {
            reply->stop = stop_reason::aborted;
            reply->error_message = "Request was aborted";
        } else {
            const std::shared_ptr<provider> p = provider_;  // set_model may switch it meanwhile
            tel_attempt_start(req.model);
            co_await p->stream(req, *reply, obs, abort_);
            attempted = true;
        }
        streaming_ = false;
        if (abort_.requested() && reply->stop != stop_reason::error) {
            reply->stop = stop_reason::aborted;
            if (!reply->error_message) reply->error_message = "Request was aborted";
        }
        if (attempted) tel_attempt_end(*reply);  // the attempt's own usage
        if (continue_from) {
            join_continuation(*reply, *continue_from);
            continue_from = nullptr;  // the first request only
        }
        if (!obs.started()) emit(message_start_event{reply});
        append(reply);
        emit(message_end_event{reply});
        policy_.on_reply_end(*reply, sink(), budget_store(), config_.budget);
        out.added.push_back(reply);
        out.last = reply;

        turn_end_event te;
        te.message = reply;
        const std::size_t tool_start = out.added.size();
        if (reply->stop == stop_reason::tool_use) co_await execute_tools(*reply, out);
        te.tool_results.assign(out.added.begin() + static_cast<std::ptrdiff_t>(tool_start),
                               out.added.end());
        emit(std::move(te));

        if (abort_.requested()) break;
        if (reply->stop == stop_reason::tool_use) continue;
        if (queue_.has_steers() && !is_failed_assistant(*reply)) continue;
        break;
    }
}

asio::awaitable<void> agent_session::execute_tools(const message& assistant, run_outcome& out) {
    for (const tool_call_block* call : tool_calls_of(assistant)) co_await execute_tool(*call, out);
}

asio::awaitable<void> agent_session::execute_tool(const tool_call_block& call, run_outcome& out) {
    emit(tool_execution_start_event{call.id, call.name, call.arguments});
    tool_output result;
    if (abort_.requested()) {
        result = {"Tool execution was aborted", true};
    } else {
        // its own coroutine, so that abort() reaches the tool's waits (terminal cancellation)
        auto run = rare().tools.call(call.name, call.arguments, *logger_);
        auto token =
            asio::bind_cancellation_slot(abort_.slot(), asio::as_tuple(asio::use_awaitable));
        auto [failure, outcome] =
            co_await asio::co_spawn(executor_, std::move(run), std::move(token));
        abort_.slot().clear();
        if (failure)
            std::rethrow_exception(failure);  // a bug: tool_runner catches what tools throw
        // interrupted: the exception that ended it (its cancelled wait) is not its result; a tool
        // that finished anyway keeps what it returned
        result = abort_.requested() && outcome.threw
                     ? tool_output{interrupted_tool_text(call.name), true}
                     : std::move(outcome.output);
    }
    json::object res;
    json::array content;
    json::object text;
    text["type"] = "text";
    text["text"] = result.text;
    content.push_back(std::move(text));
    res["content"] = std::move(content);
    emit(
        tool_execution_end_event{call.id, call.name, json::value(std::move(res)), result.is_error});
    add_tool_result(call, std::move(result), out);
}

void agent_session::add_tool_result(const tool_call_block& call, tool_output result,
                                    run_outcome& out) {
    auto tr = std::make_shared<message>(
        make_tool_result(call.id, call.name, std::move(result.text), result.is_error));
    append(tr);
    emit(message_start_event{tr});
    emit(message_end_event{tr});
    out.added.push_back(std::move(tr));
}

asio::awaitable<void> agent_session::repair_tool_calls(run_outcome& out) {
    check_tool_calls_ = false;
    const auto repairs = plan_tool_call_repair(messages_, rare_ ? &rare_->tools : nullptr);
    if (repairs.empty()) co_return;
    // the calls point into an assistant message of messages_, which is only appended to here
    for (const tool_call_repair& r : repairs) {
        if (r.run_again) {  // registered idempotent: it runs once more
            co_await execute_tool(*r.call, out);
        } else {  // not run again: only its result, as a message
            tool_output interrupted{interrupted_tool_text(r.call->name), true};
            add_tool_result(*r.call, std::move(interrupted), out);
        }
    }
}

}  // namespace coagent
