#include <coagent/retry/backoff.hpp>
#include <coagent/runtime/time_math.hpp>
#include <coagent/session/run_policy.hpp>

namespace coagent {

std::string_view to_string(prompt_result::status s) noexcept {
    switch (s) {
        case prompt_result::status::succeeded:
            return "succeeded";
        case prompt_result::status::failed:
            return "failed";
        case prompt_result::status::aborted:
            return "aborted";
        case prompt_result::status::refused:
            return "refused";
    }
    return "failed";
}

std::string_view to_string(compaction_reason r) noexcept {
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

std::optional<std::string> partial_to_continue(const message& failed, std::string_view api,
                                               const retry_settings& s, bool prefill_rejected) {
    if (!s.resume_partial || prefill_rejected || api != "anthropic-messages") return std::nullopt;
    if (failed.role != message_role::assistant || failed.stop != stop_reason::error)
        return std::nullopt;
    std::string text;
    for (const auto& b : failed.content) {
        const auto* t = std::get_if<text_block>(&b);
        if (!t) return std::nullopt;  // a tool call had started: restart
        text += t->text;
    }
    const auto end = text.find_last_not_of(" \t\r\n");
    if (end == std::string::npos) return std::nullopt;  // nothing (or only blanks) to continue
    text.resize(end + 1);
    return text;
}

bool is_prefill_rejection(const message& continued) noexcept {
    return continued.stop == stop_reason::error && continued.error_status == 400;
}

classification prefill_rejection_classification() {
    classification c;
    c.kind = error_kind::retryable;
    c.rule = "prefill/rejected";
    return c;
}

void join_continuation(message& reply, const message& failed) {
    auto& c = reply.content;
    if (c.size() >= 2 && std::holds_alternative<text_block>(c[0]) &&
        std::holds_alternative<text_block>(c[1])) {
        std::get<text_block>(c[0]).text += std::get<text_block>(c[1]).text;
        c.erase(c.begin() + 1);
    }
    token_usage& u = reply.usage;
    const token_usage& f = failed.usage;
    u.input += f.input;
    u.output += f.output;
    u.cache_read += f.cache_read;
    u.cache_write += f.cache_write;
    u.total_tokens += f.total_tokens;
    u.cost.input += f.cost.input;
    u.cost.output += f.cost.output;
    u.cost.cache_read += f.cost.cache_read;
    u.cost.cache_write += f.cost.cache_write;
    u.cost.total += f.cost.total;
}

namespace {
run_action make(run_action::kind k) noexcept {
    run_action a;
    a.what = k;
    return a;
}
}  // namespace

// What few chains need: a usage limit's decision, kept while the session asks the auth storage
// and the catalog, and the role of a model fallback made in the chain.
struct run_policy::pending_switch {
    bool switching = false;  // the decision below waits for the switch's answer
    agent_end_decision decision;
    std::vector<message_ptr> added;
    std::string provider;  // of the reply that hit the limit
    bool can_fall_back = false;
    std::optional<std::string> fallback_role;  // for retry_fallback_succeeded
};

// retry.longWait "park": the park in progress, and the probe its wake may send (§11.27)
struct run_policy::park_state {
    std::string account;  // the provider of the reply that hit the limit
    std::int64_t until = 0;
    std::int64_t parked_at = 0;
    limit_kind limit = limit_kind::none;
    std::string error;
    bool parked = false;   // the park's wait is in progress
    bool probing = false;  // this session's run is the account's probe
    // §11.37: the probe met a usage limit again; its outcome waits for the auth storage's answer
    // (a switch to a free credential: switched, else limited until `probe_until`)
    bool report_after_switch = false;
    std::int64_t probe_until = 0;
    limit_store* limits = nullptr;
    std::string session;
};

const std::string& run_policy::limit_provider() const noexcept {
    static const std::string none;
    return switch_ ? switch_->provider : none;
}

void run_policy::forget_fallback() noexcept {
    if (!switch_) return;
    switch_->fallback_role.reset();
    if (!switch_->switching) switch_.reset();
}

run_policy::pending_switch run_policy::take_switch() {
    pending_switch p = std::move(*switch_);
    if (p.fallback_role)
        *switch_ = pending_switch{false, {}, {}, {}, false, p.fallback_role};
    else
        switch_.reset();
    return p;
}

run_policy::run_policy() = default;

std::optional<std::int64_t> run_policy::parked_until() const noexcept {
    if (park_ && park_->parked && machine_.waiting()) return park_->until;
    return std::nullopt;
}
run_policy::~run_policy() = default;

bool is_request_too_large(const message& failed) noexcept {
    if (failed.role != message_role::assistant || failed.stop != stop_reason::error) return false;
    if (failed.error_status == 413 || failed.error_type == "request_too_large") return true;
    return failed.error_message &&
           failed.error_message->find("request_too_large") != std::string::npos;
}

void run_policy::start_prompt() noexcept {
    images_omitted_ = false;
    machine_.begin_prompt();
    last_ = nullptr;
    ending_ = chain_end::none;
    overflow_recovered_ = false;
    user_abort_ = false;
}

run_action run_policy::begin_prompt() noexcept {
    ran_ = false;
    start_prompt();
    return make(run_action::kind::run);
}

run_action run_policy::begin_next() noexcept {
    start_prompt();
    return make(run_action::kind::run);
}

run_action run_policy::begin_handover(bool has_queued) noexcept {
    ran_ = false;
    start_prompt();
    return next_or_settle(has_queued);
}

void run_policy::begin_compaction() noexcept {
    ran_ = false;
    start_prompt();
}

run_action run_policy::begin_summary() noexcept {
    summary_ = true;
    summary_cancelled_ = false;
    return make(run_action::kind::run);
}

void run_policy::on_reply_end(const message& reply, event_sink& out, limit_store* budget,
                              const retry_budget_settings& b) {
    if (budget && b.enabled && reply.role == message_role::assistant &&
        reply.stop != stop_reason::error && reply.stop != stop_reason::aborted)
        budget->budget_on_success(reply.provider, b);
    auto end = machine_.on_assistant_message_end(reply);
    if (!end) return;
    if (switch_ && switch_->fallback_role) {  // §9.10: just before auto_retry_end{success:true}
        out(retry_fallback_succeeded_event{reply.provider + "/" + reply.model,
                                           *switch_->fallback_role});
        forget_fallback();
    }
    out(std::move(*end));
    if (!summary_) ending_ = chain_end::succeeded;
}

run_action run_policy::on_run_end(run_end in, const settings& s, event_sink& out) {
    if (!summary_) {
        ran_ = true;
        last_ = in.last;
        abort_requested_ = in.abort_requested;
        over_threshold_ = in.over_threshold;
        has_queued_ = in.has_queued;
        images_ = in.images;
    }
    agent_end_decision d = machine_.on_agent_end(in.last.get(), in.cls, s.retry);  // §1.2
    if (!summary_) now_ = in.park.now_ms;
    if (park_ && park_->probing && !summary_) report_probe(in, d, s);
    // retry.budget (gRFC A6): every attempt that failed retryably takes a token, retried or not
    if (in.budget && s.budget.enabled && in.last && in.last->stop == stop_reason::error &&
        in.cls.kind == error_kind::retryable &&
        !in.budget->budget_on_failure(in.last->provider, s.budget))
        machine_.refuse_by_budget(d, in.last->provider);
    if (d.usage_limit) {  // §3.7: the auth storage first
        if (!switch_) switch_ = std::make_unique<pending_switch>();
        switch_->switching = true;
        switch_->decision = std::move(d);
        switch_->added = std::move(in.added);
        switch_->can_fall_back = in.can_fall_back;
        if (in.last) switch_->provider = in.last->provider;
        run_action a = make(run_action::kind::switch_credential);
        a.retry_hint_ms = switch_->decision.retry_hint_ms;
        return a;
    }
    if (d.long_wait && long_wait_falls_back(s.retry.long_wait) && in.can_fall_back &&
        s.retry.fallback && !summary_) {
        // §11.24 "fallback": the next model of retry.fallbackChains, whatever the limit
        if (!switch_) switch_ = std::make_unique<pending_switch>();
        switch_->switching = true;
        switch_->decision = std::move(d);
        switch_->added = std::move(in.added);
        switch_->can_fall_back = true;
        if (in.last) switch_->provider = in.last->provider;
        run_action a = make(run_action::kind::switch_model);
        a.retry_hint_ms = switch_->decision.retry_hint_ms;
        return a;
    }
    return after_decision(std::move(d), std::move(in.added), std::nullopt, s, out);
}

run_action run_policy::on_credential_switch(bool switched, const settings& s, event_sink& out) {
    if (park_ && park_->report_after_switch) {  // §11.37: the probe's outcome is known now
        if (park_->limits)
            park_->limits->park_probe_done(
                park_->account, park_->session,
                switched ? park_probe_outcome::switched : park_probe_outcome::limited,
                switched ? 0 : park_->probe_until, now_);
        park_.reset();
    }
    if (!switched && switch_->decision.start && switch_->can_fall_back && s.retry.fallback &&
        (!switch_->decision.long_wait || long_wait_falls_back(s.retry.long_wait))) {
        // §11.14: a model fallback, only while the chain goes on
        run_action a = make(run_action::kind::switch_model);
        a.retry_hint_ms = switch_->decision.retry_hint_ms;
        return a;
    }
    pending_switch p = take_switch();
    if (switched) machine_.usage_switch_succeeded(p.decision);  // the wait becomes 0
    return after_decision(std::move(p.decision), std::move(p.added), std::nullopt, s, out);
}

run_action run_policy::on_model_switch(std::optional<retry_fallback_applied_event> applied,
                                       const settings& s, event_sink& out) {
    pending_switch p = take_switch();
    if (applied) {
        machine_.usage_switch_succeeded(p.decision);
        switch_ = std::make_unique<pending_switch>();
        switch_->fallback_role = applied->role;
    }
    return after_decision(std::move(p.decision), std::move(p.added), std::move(applied), s, out);
}

run_action run_policy::after_decision(agent_end_decision d, std::vector<message_ptr> added,
                                      std::optional<retry_fallback_applied_event> applied,
                                      const settings& s, event_sink& out) {
    // §11.25: a long wait that no switch resolved parks (retry.longWait "park")
    const bool parked =
        d.long_wait && long_wait_parks(s.retry.long_wait) && !summary_ && machine_.park(d);
    if (!d.will_retry) forget_fallback();  // the chain is over: no success to report
    if (!summary_) out(agent_end_event{std::move(added), d.will_retry});
    if (d.end) {
        if (!summary_) ending_ = d.ending;
        out(std::move(*d.end));
    }
    if (applied) out(std::move(*applied));  // §9.10: before auto_retry_start
    if (parked) {
        const std::int64_t wait = d.park_ms;
        const limit_kind limit = d.start->limit;
        std::string error = d.start->error_message;
        out(std::move(*d.start));
        machine_.begin_wait();
        run_action a = park_until(sat_add(now_, wait), now_, wait, limit, std::move(error),
                                  last_ ? last_->provider : std::string(), out);
        a.drop_failed_reply = true;  // §3.9: only after the start event
        return a;
    }
    if (d.will_retry) {
        // §1.3: a retry that starts is checked first; no compaction for this turn
        run_action a = make(run_action::kind::wait);
        a.delay_ms = d.start->delay_ms;
        out(std::move(*d.start));
        a.drop_failed_reply = !summary_;  // §3.9: only after the start event
        machine_.begin_wait();
        return a;
    }
    if (summary_) {
        summary_ = false;
        return make(run_action::kind::summary_done);
    }
    if (d.to_compaction && !images_omitted_ && images_ > 1 && last_ &&
        is_request_too_large(*last_) && !abort_requested_) {
        // §11.33: the older images go first, once per prompt, compaction on or off
        images_omitted_ = true;
        out(images_omitted_event{images_ - 1, last_->error_message.value_or("")});
        return make(run_action::kind::omit_images);
    }
    if (d.to_compaction) {                                              // §1.5, §3.E6
        if (!s.compaction.enabled) return next_or_settle(has_queued_);  // §1.6
        if (overflow_recovered_) {                                      // §1.7
            compaction_end_event e;
            e.reason = "overflow";
            e.error_message =
                "Context overflow recovery failed after one compact-and-retry attempt. Try "
                "reducing the context (start a new session) or switching to a model with a "
                "larger context window.";
            out(std::move(e));
            return next_or_settle(has_queued_);
        }
        overflow_recovered_ = true;
        run_action a = make(run_action::kind::compact);
        a.reason = compaction_reason::overflow;
        // an overflowed (failed) reply is dropped and the turn continues once compacted
        a.resume = compact_resume_ = last_ && is_failed_assistant(*last_);
        return a;
    }
    // §1.3: a chain that just ended with a failure is not checked either
    if (!d.end && s.compaction.enabled && !abort_requested_ && over_threshold_) {
        run_action a = make(run_action::kind::compact);
        a.reason = compaction_reason::threshold;
        compact_resume_ = false;
        return a;
    }
    return next_or_settle(has_queued_);
}

run_action run_policy::on_wait_done(bool elapsed, bool has_queued, event_sink& out) {
    wait_outcome w = machine_.on_wait_done(elapsed);
    if (w.resume) return make(run_action::kind::run);  // §3.11: the continue is a new run
    out(std::move(*w.end));                            // §5.2
    forget_fallback();                                 // the chain is over: no success to report
    if (summary_) {
        summary_ = false;
        summary_cancelled_ = true;
        return make(run_action::kind::summary_done);
    }
    ending_ = w.ending;
    return next_or_settle(has_queued);
}

run_action run_policy::park_until(std::int64_t until, std::int64_t now, std::int64_t wait_ms,
                                  limit_kind limit, std::string error_message, std::string account,
                                  event_sink& out) {
    if (!park_) park_ = std::make_unique<park_state>();
    park_->account = std::move(account);
    park_->until = until;
    park_->parked_at = now;
    park_->limit = limit;
    park_->error = error_message;
    park_->parked = true;
    park_->probing = false;
    out(retry_parked_event{until, limit, std::move(error_message)});
    run_action a = make(run_action::kind::park);
    a.until_ms = until;
    // §11.26: the wake is spread so that the sessions of one account do not wake together
    const std::int64_t wake = sat_add(until, park_spread_ms(wait_ms, machine_.random01()));
    a.delay_ms = wake > now ? wake - now : 0;
    return a;
}

void run_policy::report_probe(const run_end& in, const agent_end_decision& d, const settings& s) {
    park_probe_outcome outcome = park_probe_outcome::released;
    std::int64_t until = 0;
    if (in.last && in.last->stop != stop_reason::error && in.last->stop != stop_reason::aborted) {
        outcome = park_probe_outcome::succeeded;
    } else if (d.long_wait && d.park_ms > 0 && long_wait_parks(s.retry.long_wait)) {
        outcome = park_probe_outcome::limited;
        until = sat_add(in.park.now_ms, d.park_ms);
        if (d.usage_limit) {  // the auth storage is asked first: a switch changes the outcome
            park_->report_after_switch = true;
            park_->probe_until = until;
            park_->limits = in.park.limits;
            park_->session = std::string(in.park.session);
            return;
        }
    }
    if (in.park.limits)
        in.park.limits->park_probe_done(park_->account, in.park.session, outcome, until,
                                        in.park.now_ms);
    park_.reset();
}

run_action run_policy::on_park_done(bool elapsed, bool has_queued, const park_context& ctx,
                                    event_sink& out) {
    const bool now_asked = machine_.retry_now_requested();
    if (elapsed && !now_asked && !machine_.cancel_requested() && park_ && ctx.limits) {
        const park_wake w =
            ctx.limits->park_probe_wake(park_->account, ctx.session, park_->parked_at, ctx.now_ms);
        switch (w.what) {
            case park_wake::kind::wait: {  // another session's probe is in flight
                run_action a = make(run_action::kind::park);
                a.poll = true;
                a.until_ms = park_->until;
                a.delay_ms = park_probe_poll_ms;
                return a;
            }
            case park_wake::kind::repark:  // it met the limit again: parked until the new reset
                if (w.until > ctx.now_ms)
                    return park_until(w.until, ctx.now_ms, w.until - ctx.now_ms, park_->limit,
                                      park_->error, park_->account, out);
                break;
            case park_wake::kind::probe:
                park_->probing = true;
                break;
            case park_wake::kind::go:
                break;
        }
    }
    const wait_outcome w = machine_.on_wait_done(elapsed);
    if (w.resume) {
        if (park_ && !park_->probing) park_.reset();
        if (park_) park_->parked = false;
        run_action a = make(run_action::kind::run);
        a.ended_park = run_action::park_end::resumed;
        return a;
    }
    if (park_ && park_->probing && ctx.limits)
        ctx.limits->park_probe_done(park_->account, ctx.session, park_probe_outcome::released, 0,
                                    ctx.now_ms);
    park_.reset();
    out(std::move(*w.end));  // §5.2
    forget_fallback();
    ending_ = w.ending;
    run_action a = next_or_settle(has_queued);
    // a park re-entered from the file ran nothing in this process: the cancel is its result
    if (a.what == run_action::kind::settle) a.has_result = true;
    a.ended_park = run_action::park_end::cancelled;
    return a;
}

run_action run_policy::begin_parked(int attempt, std::int64_t until, limit_kind limit,
                                    std::string error_message, std::string account,
                                    std::int64_t now, event_sink& out) {
    ran_ = false;
    start_prompt();
    now_ = now;
    machine_.resume_park(attempt);
    machine_.begin_wait();
    return park_until(until, now, until > now ? until - now : 0, limit, std::move(error_message),
                      std::move(account), out);
}

run_action run_policy::on_compaction_done(bool ok, bool has_queued) noexcept {
    if (ok && compact_resume_) return make(run_action::kind::run);
    return next_or_settle(has_queued);
}

run_action run_policy::next_or_settle(bool has_queued) noexcept {
    compact_resume_ = false;
    // queued follow-ups (and steering messages no turn picked up) run before settling; after
    // an abort() they were queued while the aborted run wound down, and the aborted prompt
    // still completes aborted
    run_action a = make(has_queued ? run_action::kind::run_queued : run_action::kind::settle);
    a.has_result = has_queued ? user_abort_ : ran_;
    return a;
}

control_effect run_policy::abort_retry() noexcept {
    control_effect e;
    const bool retried_in_flight = machine_.retried_attempt_in_flight();
    if (machine_.abort_retry())
        e.cancel_wait = true;
    else if (retried_in_flight)
        e.abort_stream = true;  // §5.4: the retried attempt is aborted too
    return e;
}

control_effect run_policy::abort() noexcept {
    user_abort_ = true;
    control_effect e;
    e.cancel_wait = machine_.abort();  // §5.3: the retry is cancelled first
    e.abort_stream = true;             // then the stream in flight
    return e;
}

prompt_result run_policy::result() const {
    prompt_result r;
    r.last_assistant = last_;
    if (is_cancelled(ending_)) {
        r.outcome = user_abort_ ? prompt_result::status::aborted : prompt_result::status::failed;
        r.error = retry_cancelled_text;
        return r;
    }
    if (!last_) return r;
    // abort() ended the run: in a failed reply, or between a tool call and the next turn.
    // (A requested abort alone is not enough: abort_retry() also aborts a retried attempt in
    // flight, e.g. the overflow compaction's summary request; that is a failure.)
    const bool cut_short = is_failed_assistant(*last_) || last_->stop == stop_reason::tool_use;
    if (last_->stop == stop_reason::aborted || (user_abort_ && cut_short)) {
        r.outcome = prompt_result::status::aborted;
        r.error = last_->error_message.value_or("Request was aborted");
    } else if (last_->stop == stop_reason::error) {
        r.outcome = prompt_result::status::failed;
        r.error = last_->error_message.value_or("Unknown error");
    }
    return r;
}

run_policy::compaction_failure run_policy::compaction_failed(bool hook_ok, bool hook_aborted,
                                                             std::string hook_error,
                                                             bool abort_requested) const {
    // abort_requested comes from abort() (user_abort) or from abort_retry() while a retried
    // summary attempt streamed: the latter cancels only the summary's retry, so the compaction
    // fails; it is not aborted (§5.8), whatever the hook said
    if (user_abort_)
        return {true, hook_ok || hook_error.empty() ? "Compaction aborted" : std::move(hook_error)};
    if (abort_requested) return {false, std::string("Compaction failed: ") + retry_cancelled_text};
    return {hook_aborted, std::move(hook_error)};
}

}  // namespace coagent
