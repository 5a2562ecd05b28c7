#pragma once
// The retry state machine (policy §3-§5, the chain endings of docs/retry-policy.md) as plain code:
// no I/O, no clock, no executor. The session feeds it what happened and performs what it decides.
//
// Inputs:  assistant_message_end, agent_end, abort_retry, abort, wait_done.
// Outputs: events to emit (auto_retry_start / auto_retry_end), whether the trailing error
//          leaves the runtime context, how long to wait, whether to continue.

#include <coagent/classify/classify.hpp>
#include <coagent/runtime/event.hpp>
#include <coagent/runtime/settings.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace coagent {

/// How a retry chain ended: the seven endings of docs/retry-policy.md §3.E. The additions of §11
/// that close a chain (`x-should-retry: false`, a server wait above retry.maxDelayMs) end it as
/// `failed` does.
enum class chain_end : unsigned char {
    none,                 ///< no chain ended
    succeeded,            ///< §3.E1 a retried attempt succeeded
    exhausted,            ///< §3.E2 retry.maxRetries exceeded
    cancelled_waiting,    ///< §3.E3 abort_retry / abort during the backoff
    cancelled_streaming,  ///< §3.E4 abort_retry / abort while a retried attempt streamed
    failed,               ///< §3.E5 a retried attempt failed with a non-retryable error
    overflowed,           ///< §3.E6 a retried attempt overflowed the context
    disabled,             ///< §3.E7 retry.enabled was turned off, then the next attempt failed
};

constexpr bool is_cancelled(chain_end e) noexcept {
    return e == chain_end::cancelled_waiting || e == chain_end::cancelled_streaming;
}

/// What to do at an agent_end.
struct agent_end_decision {
    /// agent_end.willRetry: a retry starts (auto_retry_start follows, then the wait).
    bool will_retry = false;
    /// Emit before waiting (when will_retry).
    std::optional<auto_retry_start_event> start;
    /// Emit right after agent_end: the chain ended here (exhausted, failed, cancelled).
    std::optional<auto_retry_end_event> end;
    /// How the chain ended when `end` is set (else none).
    chain_end ending = chain_end::none;
    /// The error is a usage limit: the shell asks the auth storage and, if a credential or
    /// model switch succeeded, calls usage_switch_succeeded(decision) on the same machine.
    bool usage_limit = false;
    std::optional<std::int64_t> retry_hint_ms;
    /// The message goes to the compaction path (context overflow, no retry started).
    bool to_compaction = false;
    /// retry.longWait engaged (docs/retry-policy.md §11.24): retry.maxDelayMs > 0, retry.longWait
    /// is not "fail", and the wait is above retry.maxDelayMs (a server-asked wait, honoured or
    /// not) or infinite (a billing limit). `end` holds the failure it ends with unless a model
    /// fallback (usage_switch_succeeded) or a park (park()) takes the chain on; `start` the
    /// auto_retry_start a park emits (delayMs: the park's wait).
    bool long_wait = false;
    /// The park's wait (the server-asked wait); 0: the wait cannot be parked (billing).
    std::int64_t park_ms = 0;

  private:
    friend class retry_machine;
    // A usage limit whose honoured hint is above retry.maxDelayMs ends the chain (`end`)
    // unless the auth storage switches credentials: usage_switch_succeeded() then revives it.
    int revive_attempt_ = 0;  // > 0: the attempt a switch would revive
};

/// What to do after the backoff wait completed.
struct wait_outcome {
    bool resume = false;                      // schedule the continue
    std::optional<auto_retry_end_event> end;  // cancelled: emit this, the chain is over
    chain_end ending = chain_end::none;       // cancelled_waiting when `end` is set
};

inline constexpr const char* retry_cancelled_text = "Retry cancelled";

class retry_machine {
  public:
    /// A new user prompt begins: forget a stale cancel request.
    void begin_prompt() noexcept { cancel_requested_ = false; }

    /// message_end of an assistant message. A success (not error, not aborted) while a retry
    /// is pending ends the chain's retrying: returns auto_retry_end{success:true}. The chain
    /// itself (is_retrying) stays active until its agent_end.
    std::optional<auto_retry_end_event> on_assistant_message_end(const message& m);

    /// agent_end of a run whose last assistant message is `last` (may be null) with its
    /// classification, under the current settings. The delay is compute_retry_wait() of the
    /// attempt (backoff.hpp): exactly the spec's backoff unless retry.jitter /
    /// retry.honorRetryAfter / retry.maxDelayMs say otherwise. A wait refused by
    /// retry.maxDelayMs ends the chain at once with finalError
    /// "<error> (server asked to wait <N>s, above retry.maxDelayMs)" and attempt = retries made.
    /// With retry.honorShouldRetry, `should_retry == false` (the response's x-should-retry
    /// header) makes the error not retryable. The 3-argument form reads it from
    /// `last->should_retry`.
    agent_end_decision on_agent_end(const message* last, const classification& c,
                                    const retry_settings& s);
    agent_end_decision on_agent_end(const message* last, const classification& c,
                                    const retry_settings& s, std::optional<bool> should_retry);

    /// The retry budget (retry.budget, gRFC A6) of `provider` refuses the retry `d` was about to
    /// start: the chain ends here instead, with auto_retry_end{success:false, attempt: the retries
    /// made, finalError: "<error> (retry budget for <provider> exhausted)"} (an end without a
    /// start when no retry had been made, as with maxRetries 0). No effect unless d.will_retry.
    void refuse_by_budget(agent_end_decision& d, std::string_view provider);

    /// The auth storage switched credential/model: the wait becomes 0 (policy §3 step 7); a chain
    /// that a too-long server hint was about to end goes on.
    void usage_switch_succeeded(agent_end_decision& d) noexcept;

    /// retry.longWait "park": the long wait of `d` (d.long_wait, d.park_ms > 0) parks instead of
    /// ending the chain: the chain goes on with the same attempt, `d.start` is emitted with the
    /// park's wait and the wait begins (begin_wait) like a backoff's. No effect otherwise.
    /// Returns true when it parked.
    bool park(agent_end_decision& d) noexcept;

    /// A session resumed from its file with an open park (docs/sessions.md "retry_park"): the
    /// chain is active at `attempt`, waiting.
    void resume_park(int attempt) noexcept {
        attempt_ = attempt;
        chain_active_ = true;
        waiting_ = false;
        cancel_requested_ = false;
        retry_now_ = false;
    }
    /// The uniform draw in [0, 1) (retry.jitter, the park's wake spread).
    double random01() { return draw(); }

    /// The random draw for retry.jitter: uniform in [0, 1). Default: a PRNG seeded once from
    /// std::random_device on first use (so processes do not jitter in step).
    void set_random(std::function<double()> uniform01) {
        random_ =
            uniform01 ? std::make_unique<std::function<double()>>(std::move(uniform01)) : nullptr;
    }

    /// The backoff wait is about to start.
    void begin_wait() noexcept { waiting_ = true; }
    /// The backoff wait completed; `elapsed` false when it was cancelled (by cancel, or early
    /// by retry_now(), which resumes unless abort_retry()/abort() also landed).
    wait_outcome on_wait_done(bool elapsed);

    /// abort_retry(): returns true when a backoff wait is in progress and must be cancelled
    /// by the shell. While a retried attempt streams it marks the chain cancelled (the shell
    /// aborts that stream). Otherwise no effect.
    bool abort_retry() noexcept;
    /// retry_now(): a backoff wait in progress is to end as if its timer had fired. Returns
    /// true when a wait is running and not already cancelled: the shell then cancels the timer,
    /// and on_wait_done(false) resumes. False (no effect) otherwise.
    bool retry_now() noexcept {
        if (!waiting_ || cancel_requested_) return false;
        retry_now_ = true;
        return true;
    }
    /// retry_now() ended the wait in progress (read before on_wait_done()).
    bool retry_now_requested() const noexcept { return retry_now_; }
    /// abort(): cancels the retry first (same as abort_retry) and marks the run aborted so no
    /// new retry starts from it. Returns true when a wait must be cancelled.
    bool abort() noexcept;

    int attempt() const noexcept { return attempt_; }
    /// The retry lifecycle is active: from the first retryable error of a chain to its end.
    bool is_retrying() const noexcept { return chain_active_; }
    bool waiting() const noexcept { return waiting_; }
    /// A retried attempt is in flight (abort_retry then aborts it).
    bool retried_attempt_in_flight() const noexcept {
        return chain_active_ && !waiting_ && attempt_ > 0;
    }
    bool cancel_requested() const noexcept { return cancel_requested_; }

  private:
    void end_chain() noexcept {
        attempt_ = 0;
        chain_active_ = false;
        waiting_ = false;
        cancel_requested_ = false;
        retry_now_ = false;
    }

    double draw();

    // set by tests only: a pointer keeps every session's machine small
    std::unique_ptr<std::function<double()>> random_;
    int attempt_ = 0;
    bool chain_active_ = false;
    bool waiting_ = false;
    bool cancel_requested_ = false;
    bool retry_now_ = false;  // retry_now() ended the wait early: it counts as elapsed
};

}  // namespace coagent
