#include <coagent/retry/backoff.hpp>
#include <coagent/retry/retry_machine.hpp>
#include <coagent/runtime/time_math.hpp>

#include <random>

namespace coagent {

namespace {

std::string error_text(const message* m) {
    if (m && m->error_message && !m->error_message->empty()) return *m->error_message;
    if (m && m->stop == stop_reason::aborted) return "Request was aborted";
    return "Unknown error";
}
}  // namespace

std::optional<auto_retry_end_event> retry_machine::on_assistant_message_end(const message& m) {
    if (attempt_ == 0 || m.role != message_role::assistant) return std::nullopt;
    if (m.stop == stop_reason::error || m.stop == stop_reason::aborted) return std::nullopt;
    auto_retry_end_event e{true, attempt_, std::nullopt};
    attempt_ = 0;  // the chain stays active until its agent_end
    return e;
}

double retry_machine::draw() {
    if (random_) return (*random_)();
    static thread_local std::mt19937_64 gen{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(gen);
}

void retry_machine::usage_switch_succeeded(agent_end_decision& d) noexcept {
    if (d.revive_attempt_ > 0) {
        // the switch makes the long wait moot: the chain goes on (with attempt n)
        attempt_ = d.revive_attempt_;
        chain_active_ = true;
        d.revive_attempt_ = 0;
        d.end.reset();
        d.ending = chain_end::none;
        d.will_retry = true;
    }
    if (d.start) d.start->delay_ms = 0;
}

agent_end_decision retry_machine::on_agent_end(const message* last, const classification& c,
                                               const retry_settings& s) {
    return on_agent_end(last, c, s, last ? last->should_retry : std::nullopt);
}

agent_end_decision retry_machine::on_agent_end(const message* last, const classification& c,
                                               const retry_settings& s,
                                               std::optional<bool> should_retry) {
    agent_end_decision d;
    const bool cancelled = cancel_requested_;
    const bool vetoed = s.honor_should_retry && should_retry == false;
    const bool retryable = c.retryable() && s.enabled && !cancelled && !vetoed && last &&
                           last->stop == stop_reason::error;

    if (!retryable) {
        // The chain (if any) ends here. A retry that was pending (attempt > 0) reports how.
        if (chain_active_ && attempt_ > 0) {
            std::string why = cancelled ? std::string(retry_cancelled_text) : error_text(last);
            d.end = auto_retry_end_event{false, attempt_, std::move(why)};
            d.ending = cancelled                                ? chain_end::cancelled_streaming
                       : c.kind == error_kind::context_overflow ? chain_end::overflowed
                       : !s.enabled && c.retryable() && last && last->stop == stop_reason::error
                           ? chain_end::disabled
                           : chain_end::failed;
        }
        end_chain();
        d.to_compaction = c.kind == error_kind::context_overflow && !cancelled &&
                          !(last && last->stop == stop_reason::aborted);
        return d;
    }

    ++attempt_;  // counted before the max check (policy §4)
    chain_active_ = true;
    if (attempt_ > s.max_retries) {
        d.end = auto_retry_end_event{false, attempt_ - 1, error_text(last)};
        d.ending = chain_end::exhausted;
        end_chain();
        return d;
    }
    if (s.max_delay_ms > 0 && s.long_wait != long_wait_policy::fail) {
        // retry.longWait (§11.24): a server-asked wait above retry.maxDelayMs, honoured or not
        // (a quota's reset is one), or a billing limit, which no wait heals
        const bool billing = c.limit == limit_kind::billing;
        if (billing || (c.retry_after_ms && *c.retry_after_ms > s.max_delay_ms)) {
            d.long_wait = true;
            d.usage_limit = c.kind == error_kind::usage_limit;
            d.retry_hint_ms = c.retry_after_ms;
            d.park_ms = billing ? 0 : *c.retry_after_ms;
            d.start = auto_retry_start_event{attempt_,         s.max_retries, d.park_ms,
                                             error_text(last), c.limit,       discarded_of(last)};
            d.end = auto_retry_end_event{
                false, attempt_ - 1,
                error_text(last) + (billing
                                        ? std::string(" (a billing limit: waiting will not help)")
                                        : " (server asked to wait " +
                                              std::to_string(displayed_seconds(*c.retry_after_ms)) +
                                              "s, above retry.maxDelayMs)")};
            d.ending = chain_end::failed;
            d.revive_attempt_ = attempt_;
            end_chain();
            return d;
        }
    }
    const bool jitter = s.jitter != retry_jitter::none;
    const retry_wait w = compute_retry_wait(s, attempt_, c.retry_after_ms, jitter ? draw() : 0.0);
    d.usage_limit = c.kind == error_kind::usage_limit;
    d.retry_hint_ms = c.retry_after_ms;
    d.start = auto_retry_start_event{attempt_,         s.max_retries, w.delay_ms,
                                     error_text(last), c.limit,       discarded_of(last)};
    if (w.over_max) {
        d.end = auto_retry_end_event{false, attempt_ - 1,
                                     error_text(last) + " (server asked to wait " +
                                         std::to_string(displayed_seconds(w.asked_ms)) +
                                         "s, above retry.maxDelayMs)"};
        d.ending = chain_end::failed;
        if (d.usage_limit) {
            d.revive_attempt_ = attempt_;
        }
        end_chain();
        return d;
    }
    d.will_retry = true;
    return d;
}

bool retry_machine::park(agent_end_decision& d) noexcept {
    if (!d.long_wait || d.park_ms <= 0 || d.revive_attempt_ <= 0 || !d.end) return false;
    attempt_ = d.revive_attempt_;
    chain_active_ = true;
    d.revive_attempt_ = 0;
    d.end.reset();
    d.ending = chain_end::none;
    d.will_retry = true;
    return true;
}

void retry_machine::refuse_by_budget(agent_end_decision& d, std::string_view provider) {
    if (!d.will_retry || !d.start) return;
    std::string why = std::move(d.start->error_message);
    why += " (retry budget for ";
    why += provider;
    why += " exhausted)";
    d.end = auto_retry_end_event{false, attempt_ - 1, std::move(why)};
    d.ending = chain_end::failed;
    d.will_retry = false;
    d.start.reset();
    d.usage_limit = false;
    d.retry_hint_ms.reset();
    end_chain();
}

wait_outcome retry_machine::on_wait_done(bool elapsed) {
    waiting_ = false;
    wait_outcome w;
    const bool fired = elapsed || retry_now_;
    retry_now_ = false;
    if (!fired || cancel_requested_) {
        w.end = auto_retry_end_event{false, attempt_, std::string(retry_cancelled_text)};
        w.ending = chain_end::cancelled_waiting;
        end_chain();
        return w;
    }
    w.resume = true;
    return w;
}

bool retry_machine::abort_retry() noexcept {
    if (waiting_) {
        cancel_requested_ = true;
        return true;
    }
    if (chain_active_ && attempt_ > 0) cancel_requested_ = true;  // a retried attempt streams
    return false;
}

bool retry_machine::abort() noexcept {
    bool cancel_wait = abort_retry();
    cancel_requested_ = true;  // the aborted run starts no new retry
    return cancel_wait;
}

}  // namespace coagent
