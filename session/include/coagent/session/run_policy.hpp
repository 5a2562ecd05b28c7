#pragma once
// run_policy: what a session does when a run ends, as plain code (no I/O, no clock, no
// executor). It is told what happened and answers what to do next; the events it decides on go
// to an event_sink in order. agent_session performs its actions in one loop, for prompts and for
// a compaction's summary request alike. The model: Boost.MySQL's
// `sansio_connection_node::resume(ec) -> next_action` and Boost.Redis's `run_fsm`.
//
// Rules (docs/retry-policy.md): §1 retry before compaction, one overflow recovery per prompt;
// §3 the chain's steps (usage limit: credential switch first, then model fallback; the failed
// reply leaves the context after auto_retry_start); §4 the wait; §5 cancellation; §7 one result
// per logical prompt.
//
// A busy period, as the session drives it:
//
//   begin_prompt() / begin_handover()          → run | run_queued | settle
//   run:  on_reply_end() for each assistant message_end, then
//         on_run_end()                          → switch_credential | wait | compact | run_queued
//                                                 | settle
//   switch_credential: on_credential_switch()   → switch_model | (as on_run_end)
//   switch_model:      on_model_switch()        → (as on_run_end)
//   wait:    on_wait_done()                     → run | run_queued | settle
//   park:    on_park_done()                     → run | park | run_queued | settle
//   compact: on_compaction_done()               → run | run_queued | settle
//   run_queued: the next queued message (if any) runs as a new prompt → run
//
// A compaction's summary request is a nested chain: begin_summary() → run, then the same inputs,
// ending with `summary_done` instead of settle.

#include <coagent/classify/classify.hpp>
#include <coagent/retry/retry_machine.hpp>
#include <coagent/runtime/event.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/session/limit_store.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace coagent {

struct prompt_result {
    enum class status {
        succeeded,  ///< the last assistant reply succeeded
        failed,     ///< ended in an error (incl. exhausted or cancelled retries)
        aborted,    ///< abort() ended it
        refused,    ///< not run: the session was busy and no streaming behaviour was given
    };
    status outcome = status::succeeded;
    std::string error;           ///< failed / aborted / refused: why
    message_ptr last_assistant;  ///< the last assistant message of the prompt, if any
};

/// "succeeded", "failed", "aborted", "refused" (RPC, metrics labels, span attributes).
std::string_view to_string(prompt_result::status s) noexcept;

enum class compaction_reason { overflow, threshold, manual };
std::string_view to_string(compaction_reason r) noexcept;

/// Where the policy's events go, in order (the session emits them to extensions and listeners).
class event_sink {
  public:
    virtual void operator()(event e) = 0;

  protected:
    ~event_sink() = default;
};

/// What the session does next.
struct run_action {
    enum class kind : unsigned char {
        run,                ///< start a run: a retry's or a compaction's continue (no new message)
        switch_credential,  ///< usage limit: ask the auth storage; answer on_credential_switch()
        switch_model,       ///< usage limit, no credential: model fallback; on_model_switch()
        wait,               ///< back off `delay_ms` (<= 0: a posted continue); on_wait_done()
        compact,            ///< compact(reason), continue if `resume`; on_compaction_done()
        run_queued,    ///< the prompt is over; the next queued message runs (a new logical prompt)
        settle,        ///< the busy period is over: agent_settled, prompts complete with result()
        summary_done,  ///< the summary request's reply is final (summary_cancelled() says why)
        /// 413 with images (§11.33): drop the failed reply, replace all but the newest image of
        /// the context with omitted_image_text, then run
        omit_images,
        /// retry.longWait "park": wait `delay_ms` (to the wake, `until_ms` + spread), then
        /// on_park_done(); `poll`: only waiting for another session's probe (nothing to record)
        park,
    };
    /// How the park that just ended ended, for the session file's retry_park_end entry.
    enum class park_end : unsigned char { none, resumed, cancelled };
    kind what = kind::settle;
    bool drop_failed_reply = false;  ///< wait: first take the failed reply out of the context
    bool resume = false;             ///< compact: continue the turn once compacted
    /// run_queued: abort() ended the prompt that is over (its result() goes to it now); settle:
    /// a run happened in this busy period, so result() is its prompts' result
    bool has_result = false;
    compaction_reason reason = compaction_reason::overflow;  ///< compact
    std::int64_t delay_ms = 0;                               ///< wait
    std::optional<std::int64_t> retry_hint_ms;               ///< switch_*: the server's hint
    std::int64_t until_ms = 0;                               ///< park: epoch ms
    bool poll = false;                                       ///< park: a probe wait
    park_end ended_park = park_end::none;  ///< a park ended with this action (record it)
};

/// What the park decisions need from the session (retry.longWait "park").
struct park_context {
    limit_store* limits = nullptr;  ///< where the park probes are shared (null: none)
    std::string_view session;       ///< this session's id
    std::int64_t now_ms = 0;        ///< wall clock, epoch ms
};

/// What a run (prompt, continue or summary request) ended with.
struct run_end {
    std::vector<message_ptr> added;  ///< the run's messages (agent_end.messages)
    message_ptr last;                ///< its last assistant message, if any
    classification cls;              ///< of `last`
    bool abort_requested = false;    ///< abort() / an aborted retried attempt ended it
    bool over_threshold = false;     ///< `last`'s context is above window - reserve
    bool has_queued = false;         ///< follow-up or steering messages are waiting
    bool can_fall_back = false;      ///< a model catalog can name fallback models
    std::int64_t images = 0;         ///< image blocks in the request the run was sent with
    /// retry.budget.enabled: the store that holds the budgets (null: no budget)
    limit_store* budget = nullptr;
    /// retry.longWait "park": the park probes' store, this session, now
    park_context park;
};

/// What the controls (abort_retry, abort) ask the session to do.
struct control_effect {
    bool cancel_wait = false;   ///< cancel the backoff timer
    bool abort_stream = false;  ///< abort the request in flight
};

// ---- retry.resumePartial: continue a cut reply instead of regenerating it ---------------------

/// The text a retry of the failed attempt `failed` continues from, as the assistant's prefill
/// (docs/retry-policy.md §11.22): with retry.resumePartial on, for an API that accepts a prefill
/// (`anthropic-messages`) whose rejection was not remembered for the model, when the attempt
/// failed (not aborted) after streaming text only (no tool call started): its text with trailing
/// whitespace trimmed (the API refuses a prefill that ends in whitespace). nullopt: the retry
/// restarts.
std::optional<std::string> partial_to_continue(const message& failed, std::string_view api,
                                               const retry_settings& s, bool prefill_rejected);
/// A continued attempt failed because the provider refused the prefill (HTTP 400): it is retried
/// as a full restart and the rejection remembered for the model.
bool is_prefill_rejection(const message& continued) noexcept;
/// How a prefill rejection is classified: retryable (rule "prefill/rejected").
classification prefill_rejection_classification();
/// The continued reply once streamed: `reply` began with the prefill text block; the
/// continuation's first text block joins it (one text block), and the failed attempt's usage is
/// added to the continuation's.
void join_continuation(message& reply, const message& failed);

/// A reply that failed because the request was too large for the provider: HTTP 413, or the
/// error type or text `request_too_large` (Anthropic).
bool is_request_too_large(const message& failed) noexcept;

class run_policy {
  public:
    run_policy();
    ~run_policy();
    run_policy(const run_policy&) = delete;
    run_policy& operator=(const run_policy&) = delete;

    /// A user prompt begins a busy period: its message runs.
    run_action begin_prompt() noexcept;
    /// After run_queued: the next queued prompt begins (same busy period) and runs.
    run_action begin_next() noexcept;
    /// After a manual compaction, when its queued prompts have nothing left to run (abort() or
    /// a cancellation dropped the first one's message): what is still queued runs, else the
    /// period settles. (With a message to run the session calls begin_prompt().)
    run_action begin_handover(bool has_queued) noexcept;
    /// A manual compaction begins (no run: compaction_done and the handover follow).
    void begin_compaction() noexcept;
    /// A compaction asks for its summary (nested inside `compact`): → run.
    run_action begin_summary() noexcept;

    /// An assistant message_end (of a run or a summary request): a success of a retried attempt
    /// ends the chain (retry_fallback_succeeded after a fallback, then auto_retry_end). With a
    /// `budget` store (retry.budget.enabled), a successful reply adds tokenRatio to its
    /// provider's budget.
    void on_reply_end(const message& reply, event_sink& out, limit_store* budget = nullptr,
                      const retry_budget_settings& b = {});

    /// The run ended: the retry decision first (§1.2), then compaction. With `in.budget`, a
    /// reply that failed with a retryable error (not a usage limit: those switch credentials)
    /// takes a token from its provider's budget, and a retry the budget refuses is not started:
    /// agent_end{willRetry:false}, then auto_retry_end{success:false} (retry_machine::
    /// refuse_by_budget).
    run_action on_run_end(run_end in, const settings& s, event_sink& out);
    run_action on_credential_switch(bool switched, const settings& s, event_sink& out);
    run_action on_model_switch(std::optional<retry_fallback_applied_event> applied,
                               const settings& s, event_sink& out);
    run_action on_wait_done(bool elapsed, bool has_queued, event_sink& out);
    run_action on_compaction_done(bool ok, bool has_queued) noexcept;
    /// The park's wait ended (`elapsed` false: cancelled, or ended early by retry_now()). A
    /// cancel ends the chain as a backoff's does (auto_retry_end "Retry cancelled"); retry_now()
    /// continues at once; an elapsed park asks the store's park probes (§11.27): this session
    /// probes (→ run), waits for another's probe (→ park{poll}), continues after its success
    /// (→ run) or parks again until the new reset (→ park, retry_parked again).
    run_action on_park_done(bool elapsed, bool has_queued, const park_context& ctx,
                            event_sink& out);
    /// A session resumed with an open park (docs/sessions.md "retry_park"): the busy period
    /// begins parked at `attempt` until `until` (retry_parked again) → park.
    run_action begin_parked(int attempt, std::int64_t until, limit_kind limit,
                            std::string error_message, std::string account, std::int64_t now,
                            event_sink& out);
    /// The park in progress: until when (epoch ms); nullopt when not parked.
    std::optional<std::int64_t> parked_until() const noexcept;

    /// abort_retry(): §5.1, §5.4, §5.5.
    control_effect abort_retry() noexcept;
    /// retry_now(): true when a backoff is running; the session then cancels its timer and the
    /// wait ends as if it had elapsed.
    bool retry_now() noexcept { return machine_.retry_now(); }
    /// A backoff is running and not cancelled: retry_now() would end it, and a user message
    /// may join it (§7.6: the session appends it, then calls retry_now()).
    bool backoff_running() const noexcept {
        return machine_.waiting() && !machine_.cancel_requested();
    }
    /// abort() while busy: the retry is cancelled first, then the stream (§5.3).
    control_effect abort() noexcept;
    /// The user chose a model: a fallback's success is not reported any more.
    void forget_fallback() noexcept;
    /// switch_credential / switch_model: the provider of the reply that hit the usage limit.
    const std::string& limit_provider() const noexcept;

    /// The result of the prompt whose runs ended (§7.3).
    prompt_result result() const;
    /// How a compaction that produced no summary ends: aborted (abort()), or failed with
    /// `error` — "Compaction failed: Retry cancelled" when abort_retry() cancelled its summary
    /// request (§5.8).
    struct compaction_failure {
        bool aborted = false;
        std::string error;
    };
    compaction_failure compaction_failed(bool hook_ok, bool hook_aborted, std::string hook_error,
                                         bool abort_requested) const;
    /// The summary request's chain was cancelled (its reply then says "Retry cancelled").
    bool summary_cancelled() const noexcept { return summary_cancelled_; }
    bool user_aborted() const noexcept { return user_abort_; }

    const retry_machine& machine() const noexcept { return machine_; }
    /// For tests: the jitter draw (retry_machine::set_random).
    void set_random(std::function<double()> uniform01) {
        machine_.set_random(std::move(uniform01));
    }

  private:
    struct pending_switch;
    run_action after_decision(agent_end_decision d, std::vector<message_ptr> added,
                              std::optional<retry_fallback_applied_event> applied,
                              const settings& s, event_sink& out);
    run_action next_or_settle(bool has_queued) noexcept;
    pending_switch take_switch();
    void start_prompt() noexcept;
    struct park_state;
    run_action park_until(std::int64_t until, std::int64_t now, std::int64_t wait_ms,
                          limit_kind limit, std::string error_message, std::string account,
                          event_sink& out);
    void report_probe(const run_end& in, const agent_end_decision& d, const settings& s);

    retry_machine machine_;
    message_ptr last_;  // the last assistant message of the prompt's latest run
    // rare: a usage limit's decision while the session switches, and the role of a model
    // fallback made in this chain (allocated then only, so a parked session stays small)
    std::unique_ptr<pending_switch> switch_;
    std::unique_ptr<park_state> park_;    // retry.longWait "park": from the park to the chain's end
    chain_end ending_ = chain_end::none;  // the prompt's latest chain ending
    std::int64_t now_ = 0;                // the latest run end's wall clock (a park's start)
    bool overflow_recovered_ : 1 = false;  // §1.7: this prompt compacted after an overflow
    bool user_abort_ : 1 = false;          // abort() during this prompt (not abort_retry())
    bool ran_ : 1 = false;                 // a run happened in this busy period
    bool summary_ : 1 = false;             // inside a compaction's summary request
    bool summary_cancelled_ : 1 = false;
    bool compact_resume_ : 1 = false;  // the compaction under way continues the turn
    // a run_end's facts the compaction step needs after a switch round trip
    bool abort_requested_ : 1 = false;
    bool over_threshold_ : 1 = false;
    bool has_queued_ : 1 = false;
    bool images_omitted_ : 1 = false;  // §11.33: this prompt already omitted images
    std::int64_t images_ = 0;          // the last run's request images
};

}  // namespace coagent
