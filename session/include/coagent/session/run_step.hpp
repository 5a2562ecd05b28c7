#pragma once
// What the session does once a run (prompt or continue) has ended: the decision that follows
// the retry machine's, as plain code (no I/O), so each rule is a table test of its own.
// docs/retry-policy.md §1 (retry first; a turn whose retry started is never checked for
// compaction; an overflow goes to compaction) and the one-overflow-recovery-per-prompt rule.

namespace coagent {

enum class after_run {
    settle,                  // nothing more for this run
    wait,                    // a retry started: back off, then continue (§1.3: no compaction)
    compact_overflow,        // the context overflowed: compact, then continue (§1.5)
    overflow_not_recovered,  // a second overflow in one prompt: report, settle
    compact_threshold,       // the reply succeeded but the context is near the window
};

struct after_run_input {
    bool will_retry = false;          // the retry machine started (or continued) a retry
    bool chain_ended = false;         // the retry machine ended a chain at this agent_end
    bool to_compaction = false;       // the retry machine handed the error to compaction
    bool compaction_enabled = true;   // compaction.enabled
    bool overflow_recovered = false;  // this prompt already compacted after an overflow
    bool abort_requested = false;     // abort() / an aborted retried attempt ended the run
    bool over_threshold = false;      // the last reply's context is above window - reserve
};

constexpr after_run decide_after_run(const after_run_input& in) noexcept {
    if (in.will_retry) return after_run::wait;  // §1.3: checked first; compaction is skipped
    if (in.to_compaction) {
        if (!in.compaction_enabled) return after_run::settle;
        return in.overflow_recovered ? after_run::overflow_not_recovered
                                     : after_run::compact_overflow;
    }
    if (!in.chain_ended && in.compaction_enabled && !in.abort_requested && in.over_threshold)
        return after_run::compact_threshold;
    return after_run::settle;
}

}  // namespace coagent
