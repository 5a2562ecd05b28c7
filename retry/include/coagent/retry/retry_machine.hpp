#pragma once
// The retry state machine (spec §3-§5, design.md's endings table) as plain code: no I/O, no
// clock, no executor. The session feeds it what happened and performs what it decides.
//
// Inputs:  assistant_message_end, agent_end, abort_retry, abort, wait_done.
// Outputs: events to emit (auto_retry_start / auto_retry_end), whether the trailing error
//          leaves the runtime context, how long to wait, whether to continue.

#include <coagent/classify/classify.hpp>
#include <coagent/runtime/event.hpp>
#include <coagent/runtime/settings.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace coagent {

/// What to do at an agent_end.
struct agent_end_decision {
    /// agent_end.willRetry: a retry starts (auto_retry_start follows, then the wait).
    bool will_retry = false;
    /// Emit before waiting (when will_retry).
    std::optional<auto_retry_start_event> start;
    /// Emit right after agent_end: the chain ended here (exhausted, failed, cancelled).
    std::optional<auto_retry_end_event> end;
    /// The error is a usage limit: the shell asks the auth storage and, if a credential or
    /// model switch succeeded, calls retry_machine::usage_switch_succeeded(decision).
    bool usage_limit = false;
    std::optional<std::int64_t> retry_hint_ms;
    /// The message goes to the compaction path (context overflow, no retry started).
    bool to_compaction = false;
};

/// What to do after the backoff wait completed.
struct wait_outcome {
    bool resume = false;                       // schedule the continue
    std::optional<auto_retry_end_event> end;   // cancelled: emit this, the chain is over
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
    /// classification, under the current settings.
    agent_end_decision on_agent_end(const message* last, const classification& c,
                                    const retry_settings& s);

    /// The auth storage switched credential/model: the wait becomes 0 (spec §3 step 7).
    static void usage_switch_succeeded(agent_end_decision& d) noexcept {
        if (d.start) d.start->delay_ms = 0;
    }

    /// The backoff wait is about to start.
    void begin_wait() noexcept { waiting_ = true; }
    /// The backoff wait completed; `elapsed` false when it was cancelled.
    wait_outcome on_wait_done(bool elapsed);

    /// abort_retry(): returns true when a backoff wait is in progress and must be cancelled
    /// by the shell. While a retried attempt streams it marks the chain cancelled (the shell
    /// aborts that stream). Otherwise no effect.
    bool abort_retry() noexcept;
    /// abort(): cancels the retry first (same as abort_retry) and marks the run aborted so no
    /// new retry starts from it. Returns true when a wait must be cancelled.
    bool abort() noexcept;

    int attempt() const noexcept { return attempt_; }
    /// The retry lifecycle is active: from the first retryable error of a chain to its end.
    bool is_retrying() const noexcept { return chain_active_; }
    bool waiting() const noexcept { return waiting_; }
    /// A retried attempt is in flight (abort_retry then aborts it).
    bool retried_attempt_in_flight() const noexcept { return chain_active_ && !waiting_ && attempt_ > 0; }
    bool cancel_requested() const noexcept { return cancel_requested_; }

private:
    void end_chain() noexcept {
        attempt_ = 0;
        chain_active_ = false;
        waiting_ = false;
        cancel_requested_ = false;
    }

    int attempt_ = 0;
    bool chain_active_ = false;
    bool waiting_ = false;
    bool cancel_requested_ = false;
};

}  // namespace coagent
