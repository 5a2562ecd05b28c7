// Deterministic chaos test of agent_session (issue 7): random schedules of provider outcomes
// (retryable errors, context overflow, usage limits, stalls past the idle timeout, slow and
// fast successes, tool calls) × random prompt (none / steer / followUp), abort, abort_retry,
// set_auto_retry, per-prompt cancellation (terminal / partial / total, through the slot bound
// to async_prompt), compact, new_session, set_model and EOF (issue 15) at random virtual times,
// on a manual clock. Everything derives from one
// 64-bit seed, so a failing schedule is reproduced exactly by its seed:
//
//   COAGENT_CHAOS_SEED=1234 bin/coagent_chaos_tests      one seed, with its schedule and trace
//   COAGENT_CHAOS_SEEDS=100000 bin/coagent_chaos_tests   seeds 1..100000 (default: 1..5000)
//   COAGENT_CHAOS_SEEDS=5000-9000 bin/coagent_chaos_tests
//
// Invariants checked after (and during) every schedule:
//  - every prompt completes. The prompt that starts a busy period (its user message is the
//    period's first) completes with exactly one agent_settled, the last event before it; one
//    that was queued completes right at an agent_settled, or at once as "Cancelled before it
//    ran" after a cancellation, and then its message never runs; only a prompt without a
//    streaming behaviour is refused, and a refused one never runs; agent_settled events and
//    busy periods are one to one; an aborted prompt saw an abort() or a cancellation; a queued
//    message that never ran was dropped by an abort() or a cancellation, and its prompt
//    completed aborted;
//  - every auto_retry_start chain ends with exactly one auto_retry_end (an end without a start
//    only with attempt 0), attempts count 1..n without gaps, agent_end{willRetry:true} is
//    followed by auto_retry_start, a successful end follows a successful message_end;
//  - no request ever carries an errored or aborted assistant message;
//  - the history holds every message whose message_end was published, before the event (and,
//    with a session file, the file loads back with exactly those messages in order);
//  - is_retrying() / retry_attempt() agree with the events at every step, and are false / 0
//    when the session settles.
//  - every accepted message either runs or is reported dropped (its prompt completes aborted),
//    every prompt settles, every compact() completes, and EOF (RPC mode's shutdown: abort_retry,
//    abort, no more input) ends all work within 100 ms of virtual time; a manual compaction is a
//    busy period too, settled when prompts were queued behind it;
//  - a request goes to the model it names; every set_model leaves its model_change entry.

#include "support/session_harness.hpp"

#include <coagent/providers/faux_provider.hpp>
#include <coagent/runtime/manual_clock.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace coagent;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// ---- known bugs (reported; see docs/reliability.md "Findings") -------------------------------

/// coagent::sleep_for (runtime/cancellable_wait.hpp), which the faux provider uses for delayMs
/// and stallMs, leaves its cancellation handler installed in the abort signal's slot after the
/// wait completed and its timer died with the coroutine frame; the next abort() of the session
/// emits into that handler: heap-use-after-free. While this is open the schedules give the faux
/// provider a fresh abort_signal per request (fresh_abort_provider), and the regression tests
/// at the end of this file show the bug; set it to false once sleep_for clears the slot.
constexpr bool known_bug_stale_abort_slot = false;  // fixed: sleep_for clears the slot

/// Forwards to `inner` with an abort_signal of its own per request, linked to the session's.
class fresh_abort_provider final : public provider {
  public:
    explicit fresh_abort_provider(std::shared_ptr<provider> inner) : inner_(std::move(inner)) {}
    model_info model() const override { return inner_->model(); }
    asio::awaitable<void> stream(const provider_request& req, message& out,
                                 stream_observer& observer, abort_signal& abort) override {
        abort_signal own;
        if (abort.requested()) own.request();
        abort.slot().assign([&own](asio::cancellation_type) { own.request(); });
        co_await inner_->stream(req, out, observer, own);
        abort.slot().clear();
    }

  private:
    std::shared_ptr<provider> inner_;
};

/// `inner` under another model id (set_model in the schedules switches between two of them); a
/// request that names another model than the provider it is sent to is counted.
class model_alias final : public provider {
  public:
    model_alias(std::shared_ptr<provider> inner, std::string id, int& mismatched)
        : inner_(std::move(inner)), id_(std::move(id)), mismatched_(mismatched) {}
    model_info model() const override {
        model_info m = inner_->model();
        m.id = id_;
        return m;
    }
    asio::awaitable<void> stream(const provider_request& req, message& out,
                                 stream_observer& observer, abort_signal& abort) override {
        if (req.model.id != id_) ++mismatched_;
        co_await inner_->stream(req, out, observer, abort);
    }

  private:
    std::shared_ptr<provider> inner_;
    std::string id_;
    int& mismatched_;
};

/// abort_retry() while a retried attempt streams aborts that attempt (docs/retry-policy.md, chain
/// endings) and its auto_retry_end says "Retry cancelled", but prompt() then completes with status
/// aborted and "Request was aborted" — where abort_retry() during the backoff gives failed / "Retry
/// cancelled" and prompt_result documents cancelled retries as failed (chaos seed 324). While
/// open, the schedules accept an aborted result after an abort_retry(); the regression test at
/// the end of this file shows it.
constexpr bool known_bug_abort_retry_result = false;  // fixed

/// abort_retry() while a retried attempt streams sets the session's abort flag, so the prompt
/// settles without running the follow-ups queued meanwhile; their prompts complete (with the
/// aborted result), but their messages stay queued — abort() clears the queues, abort_retry()
/// does not — and run later inside the next prompt (chaos seed 3948). While open, the schedules
/// accept a message that runs after its prompt completed once abort_retry() was called.
constexpr bool known_bug_abort_retry_leaves_queue = false;  // fixed

/// After those fixes (seeds 1..100000 again): abort_retry() while the overflow compaction's
/// summariser request is retried makes compaction_end say aborted and prompt() complete as
/// aborted, with the overflow's error text (chaos seeds 5894, 11066; `abort_.requested()` in
/// result_of and compact_context). While open, the schedules accept an aborted result when
/// abort_retry() was called during a compaction.
constexpr bool known_bug_abort_retry_in_compaction = false;  // fixed: the compaction fails

/// A followUp / steer prompt sent after abort() but before the aborted run settled (a tool still
/// running, say) is queued after abort() cleared the queues; the run does not take queued
/// messages after an abort, so the prompt completes at the settle with the aborted run's result
/// while its message stays queued and runs inside the next prompt (chaos seed 29557). While
/// open, the schedules accept that for prompts queued after an abort() in the same busy period.
constexpr bool known_bug_queued_after_abort = false;  // fixed: it runs before the settle

// ---- the schedule: everything a seed decides -------------------------------------------------

struct action {
    // compact, new_session, set_model and eof as the RPC commands do them (issue 15): new_session
    // only while idle (refused while busy), eof = RPC mode's shutdown (abort_retry(), abort(),
    // no further input)
    enum class kind {
        prompt,
        abort,
        abort_retry,
        set_auto_retry,
        cancel,
        compact,
        new_session,
        set_model,
        eof
    };
    std::int64_t at_ms = 0;
    kind type = kind::prompt;
    streaming_behavior behavior = streaming_behavior::none;
    bool enabled = true;       // set_auto_retry
    std::uint64_t target = 0;  // cancel: which prompt (modulo the prompts sent so far)
    asio::cancellation_type cancel_type = asio::cancellation_type::terminal;
};

struct schedule {
    std::uint64_t seed = 0;
    settings cfg;
    std::int64_t context_window = 128000;
    std::string script;
    std::vector<action> actions;
    bool session_file = false;
};

template <typename T, std::size_t N>
T pick(std::mt19937_64& rng, const T (&values)[N]) {
    return values[rng() % N];
}

json::object random_step(std::mt19937_64& rng) {
    json::object s;
    const auto r = rng() % 100;
    if (r < 30) {
        static constexpr const char* retryable[] = {
            "503 Service Unavailable: upstream overloaded", "overloaded_error: Overloaded",
            "Connection error.", "429 Too Many Requests retry-after-ms=7",
            "500 Internal Server Error"};
        s["error"] = pick(rng, retryable);
        if (rng() % 2)
            s["status"] = std::string_view(s["error"].as_string()).starts_with("429") ? 429 : 503;
    } else if (r < 36) {
        s["error"] = "You have reached your usage limit. Please try again in 0.02s";
    } else if (r < 43) {
        s["error"] = "400 prompt is too long: 213462 tokens > 200000 maximum";
        s["status"] = 400;
    } else if (r < 48) {
        s["error"] = "400 invalid_request_error: messages.0.content: field required";
        s["status"] = 400;
    } else if (r < 62) {
        json::object call;
        static constexpr const char* tools[] = {"echo", "echo", "slow", "missing"};
        call["name"] = pick(rng, tools);
        call["arguments"] = json::object{{"n", static_cast<std::int64_t>(rng() % 100)}};
        s["toolCall"] = std::move(call);
    } else {
        static constexpr const char* words[] = {"alpha", "beta",    "gamma",
                                                "delta", "epsilon", "zeta"};
        std::string text;
        for (auto n = 1 + rng() % 6; n > 0; --n)
            text += std::string(text.empty() ? "" : " ") + pick(rng, words);
        s["text"] = text;
        const auto u = rng() % 10;
        if (u == 0)
            s["usage"] =
                json::object{{"input", 130000}, {"output", 10}};  // silent overflow at 128k
        if (u == 1)
            s["usage"] = json::object{{"input", 120000}, {"output", 10}};  // over the threshold
    }
    static constexpr std::int64_t delays[] = {0, 0, 0, 2, 10};
    static constexpr std::int64_t stalls[] = {0, 0, 0, 0, 5, 30};
    if (auto d = pick(rng, delays)) s["delayMs"] = d;
    if (s.contains("text"))
        if (auto st = pick(rng, stalls)) s["stallMs"] = st;
    if (rng() % 6 == 0) s["times"] = static_cast<std::int64_t>(2 + rng() % 2);
    return s;
}

/// extended = false: the schedules as they were before compact / new_session / set_model / eof
/// (issue 15), so a seed reported before replays its old schedule.
schedule make_schedule(std::uint64_t seed, bool extended = true) {
    std::mt19937_64 rng(seed);
    schedule s;
    s.seed = seed;
    auto& c = s.cfg;
    c.retry.enabled = rng() % 8 != 0;
    static constexpr int max_retries[] = {0, 1, 2, 3, 3, 5};
    c.retry.max_retries = pick(rng, max_retries);
    static constexpr std::int64_t base_delays[] = {0, 1, 3, 10, 10};
    c.retry.base_delay_ms = pick(rng, base_delays);
    c.retry.honor_retry_after = rng() % 4 == 0;
    static constexpr std::int64_t max_delays[] = {0, 0, 0, 30};
    c.retry.max_delay_ms = pick(rng, max_delays);
    c.compaction.enabled = rng() % 3 != 0;
    static constexpr std::int64_t reserves[] = {16384, 16384, 40};
    c.compaction.reserve_tokens = pick(rng, reserves);
    static constexpr std::int64_t keeps[] = {20000, 10, 0};
    c.compaction.keep_recent_tokens = pick(rng, keeps);
    static constexpr std::int64_t idles[] = {0, 15, 120000};
    c.provider.stream_idle_timeout_ms = pick(rng, idles);
    static constexpr std::int64_t windows[] = {128000, 128000, 400};
    s.context_window = pick(rng, windows);
    s.session_file = rng() % 16 == 0;

    json::array steps;
    for (auto n = 3 + rng() % 20; n > 0; --n) steps.push_back(random_step(rng));
    s.script = json::serialize(steps);

    s.actions.push_back({0, action::kind::prompt, streaming_behavior::none, true});
    for (auto n = rng() % 9; n > 0; --n) {
        action a;
        a.at_ms = static_cast<std::int64_t>(rng() % 150);
        const auto k = rng() % 100;
        if (k < 35) {
            a.type = action::kind::prompt;
            static constexpr streaming_behavior behaviors[] = {
                streaming_behavior::none, streaming_behavior::steer, streaming_behavior::follow_up};
            a.behavior = pick(rng, behaviors);
        } else if (k < 50) {
            a.type = action::kind::abort;
        } else if (k < 70) {
            a.type = action::kind::abort_retry;
        } else if (k < 85) {
            a.type = action::kind::cancel;
            a.target = rng();
            static constexpr asio::cancellation_type types[] = {asio::cancellation_type::terminal,
                                                                asio::cancellation_type::partial,
                                                                asio::cancellation_type::total};
            a.cancel_type = pick(rng, types);
        } else {
            a.type = action::kind::set_auto_retry;
            a.enabled = rng() % 2 == 0;
        }
        s.actions.push_back(a);
    }
    if (extended) {
        // a second generator: the draws above (and so the old part of a schedule) are unchanged
        std::mt19937_64 more(seed ^ 0x9e3779b97f4a7c15ULL);
        for (auto n = more() % 5; n > 0; --n) {
            action a;
            a.at_ms = static_cast<std::int64_t>(more() % 150);
            static constexpr action::kind kinds[] = {action::kind::compact, action::kind::compact,
                                                     action::kind::new_session,
                                                     action::kind::set_model};
            a.type = pick(more, kinds);
            s.actions.push_back(a);
        }
        // a compaction with something queued behind it
        if (more() % 3 == 0) {
            const auto at = static_cast<std::int64_t>(more() % 150);
            s.actions.push_back({at, action::kind::compact});
            action q;
            q.at_ms = at + static_cast<std::int64_t>(more() % 3);
            q.behavior = more() % 2 ? streaming_behavior::follow_up : streaming_behavior::steer;
            s.actions.push_back(q);
        }
        if (more() % 2 == 0)
            s.actions.push_back({static_cast<std::int64_t>(more() % 200), action::kind::eof});
    }
    std::stable_sort(s.actions.begin(), s.actions.end(),
                     [](const action& a, const action& b) { return a.at_ms < b.at_ms; });
    // stdin is closed at eof: nothing comes after it
    for (std::size_t i = 0; i < s.actions.size(); ++i)
        if (s.actions[i].type == action::kind::eof) {
            s.actions.resize(i + 1);
            break;
        }
    return s;
}

std::string_view name_of(streaming_behavior b) {
    switch (b) {
        case streaming_behavior::none:
            return "none";
        case streaming_behavior::steer:
            return "steer";
        case streaming_behavior::follow_up:
            return "followUp";
    }
    return "?";
}

std::string action_name(const action& a) {
    switch (a.type) {
        case action::kind::prompt:
            return "prompt(" + std::string(name_of(a.behavior)) + ")";
        case action::kind::abort:
            return "abort";
        case action::kind::abort_retry:
            return "abort_retry";
        case action::kind::set_auto_retry:
            return std::string("set_auto_retry(") + (a.enabled ? "true" : "false") + ")";
        case action::kind::cancel: {
            const char* t = a.cancel_type == asio::cancellation_type::terminal  ? "terminal"
                            : a.cancel_type == asio::cancellation_type::partial ? "partial"
                                                                                : "total";
            return "cancel(" + std::to_string(a.target % 1000) + "," + t + ")";
        }
        case action::kind::compact:
            return "compact";
        case action::kind::new_session:
            return "new_session";
        case action::kind::set_model:
            return "set_model";
        case action::kind::eof:
            return "eof";
    }
    return "?";
}

std::string describe(const schedule& s) {
    std::ostringstream o;
    const auto& r = s.cfg.retry;
    o << "  settings: retry.enabled=" << r.enabled << " maxRetries=" << r.max_retries
      << " baseDelayMs=" << r.base_delay_ms << " honorRetryAfter=" << r.honor_retry_after
      << " maxDelayMs=" << r.max_delay_ms << " compaction.enabled=" << s.cfg.compaction.enabled
      << " reserveTokens=" << s.cfg.compaction.reserve_tokens
      << " keepRecentTokens=" << s.cfg.compaction.keep_recent_tokens
      << " streamIdleTimeoutMs=" << s.cfg.provider.stream_idle_timeout_ms
      << " contextWindow=" << s.context_window << " sessionFile=" << s.session_file
      << "\n  script: " << s.script << "\n  actions:";
    for (const auto& a : s.actions) o << " @" << a.at_ms << ":" << action_name(a);
    return o.str();
}

// ---- running one schedule ----------------------------------------------------------------------

struct prompt_record {
    streaming_behavior behavior = streaming_behavior::none;
    std::size_t events_at_call = 0;
    std::size_t events_at_done = 0;
    int aborts_at_call = 0;             // abort() calls before this prompt was sent
    bool queued_after_abort = false;    // sent while busy, after an abort() of that busy period
    int abort_retries_at_call = 0;      // abort_retry() calls before this prompt was sent
    bool cancelled = false;             // a terminal or partial cancellation was emitted to it
    std::optional<std::size_t> period;  // the busy period it started
    std::optional<std::size_t> ran_at;  // event index of its user message_end, if it ran
    std::optional<prompt_result> result;
};

/// A busy period: from its first agent_start (or a manual compaction_start) to its
/// agent_settled. A manual compaction with nothing queued behind it ends without one.
struct period_record {
    std::size_t start = 0;               // event index of its first agent_start
    std::optional<std::size_t> settled;  // event index of its agent_settled
    std::optional<std::size_t> primary;  // the prompt whose user message came first
    bool manual = false;                 // began with a manual compaction
    bool ended_unsettled = false;        // manual, nothing was queued: ended with the compaction
};

struct compact_record {
    std::size_t events_at_call = 0;
    bool busy_at_call = false;
    std::optional<compact_result> result;
};

struct stats {
    std::uint64_t schedules = 0, prompts = 0, refused = 0, requests = 0, events = 0,
                  retry_chains = 0, compactions = 0, aborts = 0, virtual_ms = 0;
};

class chaos_run {
  public:
    chaos_run(const schedule& s, bool trace, bool guard_abort = known_bug_stale_abort_slot)
        : s_(s), trace_(trace), guard_abort_(guard_abort) {}

    std::vector<std::string> run(stats& st);
    const std::string& trace() const noexcept { return log_; }

  private:
    void on_event(const event& e);
    void violation(std::string what) {
        if (violations_.size() < 8)
            violations_.push_back("@" + std::to_string(now_ms_) + "ms: " + std::move(what));
    }
    void run_ready();
    void sample();
    void perform(const action& a);
    void on_done(std::size_t index, std::exception_ptr e, prompt_result r);
    void on_compact_done(std::size_t index, std::exception_ptr e, compact_result r);
    void open_session();

    const schedule& s_;
    bool trace_;
    bool guard_abort_;
    std::string log_;
    std::vector<std::string> violations_;
    std::int64_t now_ms_ = 0;

    agent_session* session_ = nullptr;
    // every session of the run (new_session replaces the current one; the old one stays alive,
    // as RPC mode's tasks keep it); the subscription is destroyed before its session
    struct session_slot {
        std::unique_ptr<agent_session> session;
        subscription sub;
        std::vector<message_ptr> ended;  // its message_end messages, in order
    };
    std::vector<std::unique_ptr<session_slot>> sessions_;
    session_options base_options_;
    std::shared_ptr<provider> models_[2];  // the same faux script under two model ids
    int model_ = 0;                        // the current one
    std::vector<compact_record> compacts_;
    int mismatched_ = 0;  // requests sent to another model than they name
    std::optional<std::int64_t> eof_at_;
    std::vector<prompt_record> prompts_;
    std::deque<asio::cancellation_signal> signals_;  // one per prompt, bound to its async_prompt
    std::vector<period_record> periods_;
    bool in_period_ = false;
    std::vector<std::string> event_types_;
    std::vector<message_ptr> ended_;  // message_end messages, in order
    int settled_ = 0;
    bool chain_open_ = false;
    int last_attempt_ = 0;
    bool expect_start_ = false;
    int agent_depth_ = 0;
    int turn_depth_ = 0;
    bool compacting_ = false;
    int aborts_called_ = 0;
    int abort_retries_called_ = 0;
    int abort_retries_in_compaction_ = 0;
    bool aborted_in_period_ = false;
    bool any_cancel_ = false;
    std::uint64_t chains_ = 0, compactions_ = 0;
};

std::string brief(const event& e) {
    std::string t(event_type(e));
    std::visit(
        [&](const auto& ev) {
            using T = std::decay_t<decltype(ev)>;
            if constexpr (std::is_same_v<T, message_start_event> ||
                          std::is_same_v<T, message_end_event>) {
                t += ":" + std::string(to_string(ev.message->role));
                if constexpr (std::is_same_v<T, message_end_event>)
                    if (ev.message->role == message_role::assistant)
                        t += ":" + std::string(to_string(ev.message->stop));
            } else if constexpr (std::is_same_v<T, agent_end_event>) {
                t += ev.will_retry ? "{retry}" : "{final}";
            } else if constexpr (std::is_same_v<T, auto_retry_start_event>) {
                t += "{" + std::to_string(ev.attempt) + ",delay=" + std::to_string(ev.delay_ms) +
                     "}";
            } else if constexpr (std::is_same_v<T, auto_retry_end_event>) {
                t += std::string("{") + (ev.success ? "ok," : "fail,") +
                     std::to_string(ev.attempt) +
                     (ev.final_error ? "," + *ev.final_error : std::string()) + "}";
            } else if constexpr (std::is_same_v<T, compaction_end_event>) {
                t += "{" + ev.reason + (ev.will_retry ? ",continue" : "") +
                     (ev.aborted ? ",aborted" : "") + "}";
            }
        },
        e);
    return t;
}

void chaos_run::on_event(const event& e) {
    const std::string b = brief(e);
    event_types_.push_back(b);
    if (trace_ && !std::holds_alternative<message_update_event>(e))
        log_ += "    @" + std::to_string(now_ms_) + " " + b + "\n";

    if (expect_start_ && !std::holds_alternative<auto_retry_start_event>(e))
        violation("agent_end{willRetry:true} not followed by auto_retry_start but by " + b);
    expect_start_ = false;

    if (std::holds_alternative<agent_start_event>(e) && !in_period_) {
        in_period_ = true;
        periods_.push_back({event_types_.size() - 1, std::nullopt, std::nullopt});
    }
    if (const auto* cs = std::get_if<compaction_start_event>(&e);
        cs && cs->reason == "manual" && !in_period_) {
        in_period_ = true;
        period_record r;
        r.start = event_types_.size() - 1;
        r.manual = true;
        periods_.push_back(r);
    }
    if (const auto* m = std::get_if<message_end_event>(&e);
        m && m->message->role == message_role::user) {
        const std::string text = text_of(*m->message);
        if (text.starts_with("prompt #")) {
            const auto k = static_cast<std::size_t>(std::stoul(text.substr(8)));
            auto& p = prompts_.at(k);
            if (p.ran_at) violation("prompt #" + std::to_string(k) + "'s message ran twice");
            p.ran_at = event_types_.size() - 1;
            if (p.result && !(known_bug_abort_retry_leaves_queue && abort_retries_called_ > 0) &&
                !(known_bug_queued_after_abort && p.queued_after_abort))
                violation("prompt #" + std::to_string(k) +
                          "'s message ran after the prompt completed");
            if (!periods_.empty() && !periods_.back().primary && !periods_.back().settled) {
                periods_.back().primary = k;
                p.period = periods_.size() - 1;
            }
        }
    }
    if (const auto* m = std::get_if<message_end_event>(&e)) {
        // persisted before any listener sees its message_end
        const auto& entries = session_->history().entries();
        bool found = false;
        for (auto it = entries.rbegin(); it != entries.rend() && !found; ++it)
            found = it->msg == m->message;
        if (!found) violation("message_end of a message that is not in the history: " + b);
        ended_.push_back(m->message);
        sessions_.back()->ended.push_back(m->message);
    } else if (const auto* a = std::get_if<agent_end_event>(&e)) {
        if (--agent_depth_ != 0) violation("agent_end without agent_start");
        expect_start_ = a->will_retry;
    } else if (std::holds_alternative<agent_start_event>(e)) {
        if (agent_depth_++ != 0) violation("agent_start inside a run");
    } else if (std::holds_alternative<turn_start_event>(e)) {
        if (turn_depth_++ != 0) violation("turn_start inside a turn");
    } else if (std::holds_alternative<turn_end_event>(e)) {
        if (--turn_depth_ != 0) violation("turn_end without turn_start");
    } else if (const auto* st = std::get_if<auto_retry_start_event>(&e)) {
        if (!chain_open_ && st->attempt != 1)
            violation("a retry chain started at attempt " + std::to_string(st->attempt));
        if (chain_open_ && st->attempt != last_attempt_ + 1)
            violation("attempt " + std::to_string(st->attempt) + " after attempt " +
                      std::to_string(last_attempt_));
        if (st->max_attempts != s_.cfg.retry.max_retries)
            violation("maxAttempts is not retry.maxRetries");
        if (st->delay_ms < 0) violation("negative delay");
        if (!chain_open_) ++chains_;
        chain_open_ = true;
        last_attempt_ = st->attempt;
    } else if (const auto* en = std::get_if<auto_retry_end_event>(&e)) {
        if (chain_open_ && en->attempt != last_attempt_)
            violation("auto_retry_end attempt " + std::to_string(en->attempt) + " after start " +
                      std::to_string(last_attempt_));
        if (!chain_open_ && (en->attempt != 0 || en->success))
            violation("auto_retry_end without auto_retry_start: " + b);
        if (en->success) {
            // right after the successful reply's message_end; inside a compaction the
            // summariser's retried request succeeds without a published message
            const auto& prev =
                event_types_.size() >= 2 ? event_types_[event_types_.size() - 2] : std::string();
            if (!compacting_ && (!prev.starts_with("message_end:assistant:") ||
                                 prev.ends_with(":error") || prev.ends_with(":aborted")))
                violation("auto_retry_end{success} not right after a successful reply (after " +
                          prev + ")");
        } else if (!en->final_error || en->final_error->empty()) {
            violation("auto_retry_end{success:false} without finalError");
        }
        chain_open_ = false;
        last_attempt_ = 0;
    } else if (std::holds_alternative<compaction_start_event>(e)) {
        ++compactions_;
        if (compacting_) violation("compaction_start inside a compaction");
        compacting_ = true;
    } else if (const auto* ce = std::get_if<compaction_end_event>(&e)) {
        // alone only as the reference's "one overflow recovery per prompt" notice
        if (!compacting_ && !(ce->reason == "overflow" && ce->error_message && !ce->will_retry))
            violation("compaction_end without compaction_start");
        compacting_ = false;
    } else if (std::holds_alternative<agent_settled_event>(e)) {
        ++settled_;
        if (!in_period_ || periods_.empty())
            violation("agent_settled outside a busy period");
        else
            periods_.back().settled = event_types_.size() - 1;
        in_period_ = false;
        aborted_in_period_ = false;
        if (chain_open_) violation("agent_settled with a retry chain still open");
        if (session_->is_retrying() || session_->retry_attempt() != 0)
            violation("agent_settled while is_retrying()");
        if (session_->is_busy()) violation("agent_settled while busy");
        if (agent_depth_ != 0 || turn_depth_ != 0 || compacting_)
            violation("agent_settled inside a run, turn or compaction");
    }
}

void chaos_run::sample() {
    // is_retrying() agrees with the events: on during an open chain (with its attempt); off and
    // 0 when idle. (Between a retried attempt's successful message_end and its agent_end the
    // chain has ended but the machine keeps is_retrying() until agent_end: documented.)
    if (chain_open_ && (!session_->is_retrying() || session_->retry_attempt() != last_attempt_))
        violation("is_retrying()/retry_attempt() = " + std::to_string(session_->is_retrying()) +
                  "/" + std::to_string(session_->retry_attempt()) +
                  " during an open chain at attempt " + std::to_string(last_attempt_));
    if (!session_->is_busy() && (session_->is_retrying() || session_->retry_attempt() != 0))
        violation("is_retrying() while idle");
}

void chaos_run::run_ready() {
    // every handler that is ready, until none is (a cap turns a livelock into a violation)
    auto& io = static_cast<asio::io_context&>(session_->get_executor().context());
    for (int rounds = 0;; ++rounds) {
        io.restart();
        if (io.poll() == 0) break;
        if (rounds > 100000) {
            violation("livelock: handlers keep becoming ready without time passing");
            break;
        }
    }
    sample();
}

void chaos_run::on_done(std::size_t index, std::exception_ptr e, prompt_result r) {
    auto& p = prompts_[index];
    if (p.result) violation("prompt #" + std::to_string(index) + " completed twice");
    if (e) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            violation("prompt #" + std::to_string(index) + " threw: " + x.what());
        }
    }
    p.events_at_done = event_types_.size();
    p.result = std::move(r);
    if (trace_)
        log_ += "    @" + std::to_string(now_ms_) + " prompt #" + std::to_string(index) +
                " completed: " + std::to_string(static_cast<int>(p.result->outcome)) + " " +
                p.result->error + "\n";
}

void chaos_run::perform(const action& a) {
    if (trace_) log_ += "  @" + std::to_string(now_ms_) + " call " + action_name(a) + "\n";
    switch (a.type) {
        case action::kind::prompt: {
            const std::size_t index = prompts_.size();
            prompt_record rec;
            rec.behavior = a.behavior;
            rec.events_at_call = event_types_.size();
            rec.aborts_at_call = aborts_called_;
            rec.queued_after_abort = session_->is_busy() && aborted_in_period_;
            rec.abort_retries_at_call = abort_retries_called_;
            prompts_.push_back(rec);
            signals_.emplace_back();
            session_->async_prompt(
                "prompt #" + std::to_string(index), a.behavior,
                asio::bind_cancellation_slot(signals_.back().slot(),
                                             [this, index](std::exception_ptr e, prompt_result r) {
                                                 on_done(index, std::move(e), std::move(r));
                                             }));
            break;
        }
        case action::kind::cancel: {
            if (prompts_.empty()) break;
            const std::size_t index = a.target % prompts_.size();
            if (a.cancel_type != asio::cancellation_type::total && !prompts_[index].result) {
                prompts_[index].cancelled = true;
                any_cancel_ = true;
            }
            signals_[index].emit(a.cancel_type);  // after completion: no effect
            break;
        }
        case action::kind::abort:
            ++aborts_called_;
            if (session_->is_busy()) aborted_in_period_ = true;
            session_->abort();
            break;
        case action::kind::abort_retry:
            ++abort_retries_called_;
            if (session_->is_compacting()) ++abort_retries_in_compaction_;
            session_->abort_retry();
            break;
        case action::kind::set_auto_retry:
            session_->set_auto_retry_enabled(a.enabled);
            break;
        case action::kind::compact: {
            const std::size_t index = compacts_.size();
            compacts_.push_back({event_types_.size(), session_->is_busy(), std::nullopt});
            asio::co_spawn(session_->get_executor(), session_->compact(),
                           [this, index](std::exception_ptr e, compact_result r) {
                               on_compact_done(index, std::move(e), std::move(r));
                           });
            break;
        }
        case action::kind::new_session:
            // as RPC mode: refused while busy; the new session keeps the model
            if (!session_->is_busy()) open_session();
            break;
        case action::kind::set_model: {
            model_ = 1 - model_;
            session_->set_model(models_[model_]);
            const auto& entries = session_->history().entries();
            if (entries.empty() || entries.back().type != "model_change" ||
                entries.back().raw.at("modelId") != json::value(models_[model_]->model().id))
                violation("set_model did not append its model_change entry");
            break;
        }
        case action::kind::eof:
            // RPC mode's shutdown at stdin EOF: cancel the retry, abort, no more input
            eof_at_ = now_ms_;
            ++aborts_called_;
            ++abort_retries_called_;
            if (session_->is_busy()) aborted_in_period_ = true;
            if (session_->is_compacting()) ++abort_retries_in_compaction_;
            session_->abort_retry();
            session_->abort();
            break;
    }
    run_ready();
}

void chaos_run::on_compact_done(std::size_t index, std::exception_ptr e, compact_result r) {
    auto& c = compacts_[index];
    if (c.result) violation("compact #" + std::to_string(index) + " completed twice");
    if (e) violation("compact #" + std::to_string(index) + " threw");
    if (c.busy_at_call) {
        if (r.ok || event_types_.size() != c.events_at_call)
            violation("compact while busy was not refused at once");
    } else if (!periods_.empty() && periods_.back().manual && in_period_ &&
               !periods_.back().primary && !session_->is_busy()) {
        // nothing was queued behind it: the period ends with the compaction, without a settle
        periods_.back().ended_unsettled = true;
        in_period_ = false;
        aborted_in_period_ = false;
    }
    if (trace_)
        log_ += "    @" + std::to_string(now_ms_) + " compact #" + std::to_string(index) +
                " completed: " + (r.ok ? "ok" : r.error) + "\n";
    c.result = std::move(r);
}

/// A session with the run's options and tools on the current model (the first one, and each
/// new_session).
void chaos_run::open_session() {
    session_options so = base_options_;
    so.model_provider = models_[model_];
    auto slot = std::make_unique<session_slot>();
    slot->session = std::make_unique<agent_session>(std::move(so));
    auto& session = *slot->session;
    session.register_tool(tool_definition{"echo", "echoes its arguments", {}},
                          [](json::object args) -> asio::awaitable<tool_output> {
                              co_return tool_output{json::serialize(args), false};
                          });
    session.register_tool(tool_definition{"slow", "answers after 4 ms", {}},
                          [](json::object) -> asio::awaitable<tool_output> {
                              manual_timer t(co_await asio::this_coro::executor);
                              t.expires_after(std::chrono::milliseconds(4));
                              co_await t.async_wait(asio::use_awaitable);
                              co_return tool_output{"slow done", false};
                          });
    slot->sub = session.subscribe([this](const event& e) { on_event(e); });
    session_ = &session;
    sessions_.push_back(std::move(slot));
}

std::vector<std::string> chaos_run::run(stats& st) {
    manual_clock::reset();
    std::optional<fs::path> dir;
    if (s_.session_file) {
        dir = fs::temp_directory_path() /
              ("coagent-chaos-" + std::to_string(::getpid()) + "-" + std::to_string(s_.seed));
        fs::remove_all(*dir);
    }
    std::shared_ptr<faux_provider> faux;
    std::vector<std::pair<fs::path, std::vector<message_ptr>>> files;  // of the sessions
    {
        asio::io_context io;
        faux_options fo;
        fo.script = faux_script::parse(s_.script, "<chaos>");
        fo.clock = clock_kind::manual;
        fo.stream_idle_timeout_ms = s_.cfg.provider.stream_idle_timeout_ms;
        fo.context_window = s_.context_window;
        faux = std::make_shared<faux_provider>(std::move(fo));
        const auto inner =
            guard_abort_ ? std::shared_ptr<provider>(std::make_shared<fresh_abort_provider>(faux))
                         : std::shared_ptr<provider>(faux);
        models_[0] = std::make_shared<model_alias>(inner, "faux", mismatched_);
        models_[1] = std::make_shared<model_alias>(inner, "faux-b", mismatched_);
        base_options_.executor = io.get_executor();
        base_options_.config = s_.cfg;
        base_options_.clock = clock_kind::manual;
        base_options_.now_ms = [] { return std::int64_t{1'700'000'000'000}; };
        if (dir) base_options_.session_dir = *dir;
        open_session();

        constexpr std::int64_t cap_ms = 600'000;  // virtual: far beyond any schedule
        std::size_t next = 0;
        auto all_done = [&] {
            for (const auto& p : prompts_)
                if (!p.result) return false;
            for (const auto& c : compacts_)
                if (!c.result) return false;
            return true;
        };
        for (now_ms_ = 0;; ++now_ms_) {
            while (next < s_.actions.size() && s_.actions[next].at_ms <= now_ms_)
                perform(s_.actions[next++]);
            if (next == s_.actions.size() && all_done() && !session_->is_busy()) break;
            if (now_ms_ >= cap_ms) {
                violation("hang: a prompt never completed");
                break;
            }
            // EOF ends the process: what runs is aborted, nothing waits for more input
            if (eof_at_ && now_ms_ - *eof_at_ > 100) {
                violation("EOF did not end the work within 100 ms: a prompt or compaction hangs");
                break;
            }
            manual_clock::advance(std::chrono::milliseconds(1));
            run_ready();
        }
        st.virtual_ms += static_cast<std::uint64_t>(now_ms_);

        // ---- after the schedule ----
        std::size_t primaries = 0;
        for (std::size_t i = 0; i < prompts_.size(); ++i) {
            const auto& p = prompts_[i];
            const std::string who =
                "prompt #" + std::to_string(i) + " (" + std::string(name_of(p.behavior)) + ")";
            if (!p.result) continue;  // reported as a hang
            const auto& res = *p.result;
            using status = prompt_result::status;
            const bool refused = res.outcome == status::refused;
            const bool cancelled_before_run =
                res.outcome == status::aborted && res.error == "Cancelled before it ran";
            if (refused) {
                ++st.refused;
                if (p.behavior != streaming_behavior::none)
                    violation(who + " refused although it could queue");
                if (p.ran_at) violation(who + " refused, but its message ran");
                if (p.events_at_done != p.events_at_call)
                    violation(who + ": refused, but events were emitted");
                continue;
            }
            if (cancelled_before_run) {
                if (!p.cancelled)
                    violation(who + " \"Cancelled before it ran\" without a cancellation");
                if (p.ran_at) violation(who + " cancelled before it ran, but its message ran");
                if (p.period)
                    violation(who + " cancelled before it ran, but it started a busy period");
                continue;
            }
            if (p.period) {
                // it started a busy period: completes with that period's agent_settled, the last
                // event before it
                ++primaries;
                const auto& period = periods_[*p.period];
                if (!period.settled) {
                    violation(who + " completed, but its busy period never settled");
                } else if (*period.settled + 1 != p.events_at_done) {
                    violation(who + " completed " +
                              std::to_string(p.events_at_done - *period.settled - 1) +
                              " events after its agent_settled");
                }
            } else {
                // a plain prompt that was not refused and started no period joined a backoff
                // (issue 26): its message is in the conversation
                if (p.behavior == streaming_behavior::none && !p.ran_at)
                    violation(who + " neither refused nor run (it did not join a backoff either)");
                // queued: completes right at an agent_settled that came after it was sent
                if (p.events_at_done == 0 ||
                    event_types_[p.events_at_done - 1] != "agent_settled" ||
                    p.events_at_done - 1 < p.events_at_call)
                    violation(who + " (queued) did not complete right at an agent_settled");
            }
            // the result says how the prompt ended
            if (res.outcome == status::succeeded &&
                (!res.last_assistant || is_failed_assistant(*res.last_assistant)))
                violation(who + " succeeded without a successful reply");
            if (res.outcome != status::succeeded && res.error.empty())
                violation(who + " failed without an error text");
            const bool known_abort_retry =
                (known_bug_abort_retry_result && abort_retries_called_ > p.abort_retries_at_call) ||
                (known_bug_abort_retry_in_compaction && abort_retries_in_compaction_ > 0);
            if (p.period && res.outcome == status::aborted && aborts_called_ == p.aborts_at_call &&
                !any_cancel_ && !known_abort_retry)
                violation(who + " aborted although nothing aborted or cancelled it");
            // a queued message that never ran was dropped: only by abort() (or by cancelling the
            // running prompt), and its prompt says so
            if (!p.period && !p.ran_at) {
                if (res.outcome != status::aborted)
                    violation(who + " never ran, but did not complete aborted");
                if (aborts_called_ == p.aborts_at_call && !any_cancel_)
                    violation(who + " never ran, although nothing aborted or cancelled");
            }
        }
        // a manual compaction's period has a prompt's message only when one was queued behind it
        // and ran; it settles when anything was queued behind it, else it ends unsettled
        std::size_t settled_periods = 0, with_primary = 0;
        for (std::size_t k = 0; k < periods_.size(); ++k) {
            const auto& period = periods_[k];
            settled_periods += period.settled.has_value();
            with_primary += period.primary.has_value();
            if (!period.primary && !period.manual)
                violation("busy period " + std::to_string(k) +
                          " started without a prompt's message");
            if (period.primary && period.ended_unsettled)
                violation("busy period " + std::to_string(k) + " ran a prompt but never settled");
            if (!period.settled && !period.ended_unsettled &&
                !(in_period_ && k + 1 == periods_.size()))
                violation("busy period " + std::to_string(k) + " never ended");
        }
        if (static_cast<std::size_t>(settled_) != settled_periods)
            violation(std::to_string(settled_) + " agent_settled for " +
                      std::to_string(settled_periods) + " settled busy periods");
        if (primaries != with_primary)
            violation(std::to_string(primaries) + " prompts started " +
                      std::to_string(with_primary) + " busy periods");
        for (std::size_t i = 0; i < compacts_.size(); ++i)
            if (!compacts_[i].result)
                violation("compact #" + std::to_string(i) + " never completed");
        if (mismatched_ > 0)
            violation(std::to_string(mismatched_) +
                      " requests were sent to a provider other than the model they name");
        if (chain_open_) violation("a retry chain never ended");

        for (std::size_t i = 0; const auto& r : faux->requests()) {
            ++i;
            for (const auto& m : r.messages)
                if (m.role == "assistant" &&
                    (m.stop_reason == "error" || m.stop_reason == "aborted"))
                    violation("request " + std::to_string(i) + " carries an " + m.stop_reason +
                              " assistant message");
        }
        // each session's history holds every message whose message_end it published
        for (const auto& slot : sessions_)
            for (const auto& m : slot->ended) {
                bool found = false;
                for (const auto& e : slot->session->history().entries())
                    found = found || e.msg == m;
                if (!found) violation("a published message is missing from the history");
            }
        st.prompts += prompts_.size();
        st.requests += faux->request_count();
        st.events += event_types_.size();
        st.retry_chains += chains_;
        st.compactions += compactions_;
        for (const auto& a : s_.actions)
            st.aborts += a.type == action::kind::abort || a.type == action::kind::abort_retry ||
                         a.type == action::kind::cancel;
        for (const auto& slot : sessions_)
            if (slot->session->history().file())
                files.emplace_back(*slot->session->history().file(), slot->ended);
        session_ = nullptr;
        sessions_.clear();  // before the io_context they run on
    }
    if (dir) {
        // each session file loads back with exactly the messages its session published, in order
        std::size_t found_files = 0;
        for ([[maybe_unused]] const auto& f : fs::directory_iterator(*dir)) ++found_files;
        if (found_files != files.size())
            violation("expected " + std::to_string(files.size()) + " session files, found " +
                      std::to_string(found_files));
        for (const auto& [file, ended] : files) {
            try {
                auto loaded = session_history::load(file);
                const auto msgs = loaded.history.messages();
                if (msgs.size() != ended.size())
                    violation("the session file has " + std::to_string(msgs.size()) +
                              " messages, " + std::to_string(ended.size()) + " were published");
                for (std::size_t i = 0; i < std::min(msgs.size(), ended.size()); ++i)
                    if (msgs[i]->role != ended[i]->role || msgs[i]->stop != ended[i]->stop ||
                        text_of(*msgs[i]) != text_of(*ended[i])) {
                        violation("session file message " + std::to_string(i) +
                                  " differs from the published one");
                        break;
                    }
                for (const auto& w : loaded.warnings) violation("session file warning: " + w);
            } catch (const std::exception& e) {
                violation(std::string("the session file does not load: ") + e.what());
            }
        }
        fs::remove_all(*dir);
    }
    ++st.schedules;
    return violations_;
}

// ---- seeds -----------------------------------------------------------------------------------

struct seed_range {
    std::uint64_t first = 1, last = 5000;
    bool single = false;
};

seed_range seeds_from_env() {
    seed_range r;
    if (const char* one = std::getenv("COAGENT_CHAOS_SEED"); one && *one) {
        r.first = r.last = std::strtoull(one, nullptr, 10);
        r.single = true;
    } else if (const char* many = std::getenv("COAGENT_CHAOS_SEEDS"); many && *many) {
        std::string v(many);
        if (auto dash = v.find('-'); dash != std::string::npos) {
            r.first = std::strtoull(v.substr(0, dash).c_str(), nullptr, 10);
            r.last = std::strtoull(v.substr(dash + 1).c_str(), nullptr, 10);
        } else {
            r.last = std::strtoull(v.c_str(), nullptr, 10);
        }
    }
    return r;
}

/// Runs one seed; on a violation prints the seed, how to reproduce it, the schedule and
/// (with trace) the events. Returns the violations.
std::vector<std::string> run_seed(std::uint64_t seed, bool trace, stats& st,
                                  bool guard_abort = known_bug_stale_abort_slot,
                                  bool extended = true) {
    if (const char* raw = std::getenv("COAGENT_CHAOS_RAW_FAUX"); raw && *raw == '1')
        guard_abort = false;
    const schedule s = make_schedule(seed, extended);
    chaos_run r(s, trace, guard_abort);
    auto v = r.run(st);
    if (!v.empty() || trace) {
        std::ostringstream o;
        o << "chaos seed " << seed << (v.empty() ? ": ok" : ": INVARIANT VIOLATED") << "\n";
        for (const auto& x : v) o << "  - " << x << "\n";
        o << "  reproduce: COAGENT_CHAOS_SEED=" << seed << " coagent_chaos_tests\n"
          << describe(s) << "\n";
        if (trace) o << "  trace:\n" << r.trace();
        std::cerr << o.str() << std::flush;
    }
    return v;
}

// A tool "slow" that answers "slow done" after 10 ms on the manual clock: a run that is still
// winding down (a tool running) when abort() or a queued prompt arrives.
void register_slow_tool(agent_session& session) {
    session.register_tool(tool_definition{"slow", "answers after 10 ms", {}},
                          [](json::object) -> asio::awaitable<tool_output> {
                              manual_timer t(co_await asio::this_coro::executor);
                              t.expires_after(std::chrono::milliseconds(10));
                              co_await t.async_wait(asio::use_awaitable);
                              co_return tool_output{"slow done", false};
                          });
}

// a tool that finishes its 10 ms whatever abort() says (it takes no cancellation)
void register_stubborn_tool(agent_session& session) {
    session.register_tool(
        tool_definition{"slow", "answers after 10 ms, uninterruptible", {}},
        [](json::object) -> asio::awaitable<tool_output> {
            co_await asio::this_coro::reset_cancellation_state(
                [](asio::cancellation_type) { return asio::cancellation_type::none; });
            manual_timer t(co_await asio::this_coro::executor);
            t.expires_after(std::chrono::milliseconds(10));
            co_await t.async_wait(asio::use_awaitable);
            co_return tool_output{"slow done", false};
        });
}

}  // namespace

TEST_CASE("chaos: random schedules of faults and calls keep the session's invariants", "[chaos]") {
    const seed_range range = seeds_from_env();
    stats st;
    std::vector<std::uint64_t> failing;
    const auto started = std::chrono::steady_clock::now();
    for (std::uint64_t seed = range.first; seed <= range.last; ++seed) {
        if (!run_seed(seed, range.single, st).empty()) {
            failing.push_back(seed);
            if (failing.size() >= 10) break;  // enough to work on
        }
    }
    const auto secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::ostringstream summary;
    summary << "chaos: seeds " << range.first << ".." << (range.first + st.schedules - 1) << ": "
            << st.schedules << " schedules, " << st.prompts << " prompts (" << st.refused
            << " refused), " << st.requests << " provider requests, " << st.retry_chains
            << " retry chains, " << st.compactions << " compactions, " << st.aborts
            << " abort/abort_retry/cancel calls, " << st.events << " events, " << st.virtual_ms
            << " virtual ms in " << secs << " s";
    std::cerr << summary.str() << "\n";
    std::ostringstream f;
    for (auto s : failing) f << s << " ";
    INFO("failing seeds: " << f.str());
    CHECK(failing.empty());
}

// ---- regressions: bugs the schedules found (reported; docs/reliability.md "Findings") --------
// [!shouldfail]: passes while the bug is there, fails once it is fixed (then drop the tag).
// [.]: crashes under ASan while the bug is there; run with  coagent_chaos_tests "[regression]".

TEST_CASE("fixed bug: sleep_for leaves no handler in the abort slot after the wait completed",
          "[chaos][regression]") {
    manual_clock::reset();
    asio::io_context io;
    abort_signal abort;
    std::optional<bool> elapsed;
    asio::co_spawn(io,
                   sleep_for(io.get_executor(), clock_kind::manual, std::chrono::milliseconds(1),
                             abort.slot()),
                   [&](std::exception_ptr, bool e) { elapsed = e; });
    io.poll();
    manual_clock::advance(std::chrono::milliseconds(1));
    io.restart();
    io.poll();
    REQUIRE(elapsed == true);
    // the timer died with sleep_for's frame: a handler left in the slot points at it, and the
    // session's next abort() (abort_signal::request → emit) cancels a destroyed timer
    CHECK_FALSE(abort.slot().has_handler());
}

TEST_CASE(
    "fixed bug: abort_retry while a retried attempt streams reports a failed prompt, not aborted "
    "(seed 324)",
    "[chaos][regression]") {
    coagent::test::harness h(
        R"([{"error":"503 Service Unavailable","status":503},{"text":"late reply","delayMs":5000}])");
    h.prompt("hi");
    h.advance(std::chrono::milliseconds(2000));  // the retried attempt is in flight (5 s delay)
    REQUIRE(h.session->is_streaming());
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.of("auto_retry_end").at(0).at("finalError") == "Retry cancelled");
    // as after abort_retry() during the backoff: cancelled retries are a failure, not an abort
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.result->error == "Retry cancelled");
}

TEST_CASE(
    "fixed bug: abort_retry while a retried attempt streams runs the queued follow-ups before "
    "settling (seed 3948)",
    "[chaos][regression]") {
    coagent::test::harness h(
        R"([{"error":"503 Service Unavailable","status":503},{"text":"late reply","delayMs":5000},{"text":"one"},{"text":"two"}])");
    h.prompt("first");
    h.advance(std::chrono::milliseconds(2000));  // the retried attempt is in flight
    std::optional<prompt_result> queued;
    h.prompt_into("queued follow-up", streaming_behavior::follow_up, queued);
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());
    REQUIRE(queued);  // the follow-up's prompt completed at the settle...
    const auto settled_at = h.events.size();
    std::optional<prompt_result> next;
    h.prompt_into("next prompt", streaming_behavior::none, next);
    h.advance(std::chrono::milliseconds(10));
    REQUIRE(next);
    // ... so its message must not run afterwards, inside another prompt
    int ghost = 0;
    for (std::size_t i = settled_at; i < h.events.size(); ++i)
        if (h.events[i].at("type") == "message_end" &&
            h.events[i].at("message").at("role") == "user" &&
            h.events[i].at("message").at("content").at(0).at("text") == "queued follow-up")
            ++ghost;
    CHECK(ghost == 0);
    CHECK(h.session->pending_message_count() == 0);
}

TEST_CASE(
    "fixed bug: abort_retry during the overflow compaction's retried summary request fails the "
    "compaction and the prompt, no abort (seed 5894)",
    "[chaos][regression]") {
    settings cfg;
    cfg.compaction.keep_recent_tokens = 0;
    coagent::test::harness h(R"([{"text":"first answer"},
        {"error":"400 prompt is too long: 213462 tokens > 200000 maximum","status":400},
        {"error":"503 Service Unavailable","status":503},{"text":"the summary","delayMs":5000}])",
                             cfg);
    h.prompt("one");
    REQUIRE(h.done());
    h.result.reset();
    const auto context_before = h.session->messages().size();
    h.prompt("two");  // overflow → compaction → the summary request fails with 503 → retried
    h.advance(std::chrono::milliseconds(2000));
    REQUIRE(h.session->is_compacting());
    h.session->abort_retry();  // while the retried summary request streams (5 s delay)
    h.run_ready();
    REQUIRE(h.done());
    // abort_retry() cancels a retry: a failure, never an abort (as outside a compaction)
    CHECK(h.of("auto_retry_end").back().at("finalError") == "Retry cancelled");
    const auto end = h.of("compaction_end").back();
    CHECK(end.at("aborted") == false);
    CHECK(end.at("willRetry") == false);
    CHECK(end.at("errorMessage") == "Compaction failed: Retry cancelled");
    // the prompt fails with the overflow it could not recover from
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.result->error == "400 prompt is too long: 213462 tokens > 200000 maximum");
    // nothing was compacted: the context is the one before, plus the prompt and its failed reply
    CHECK(h.session->messages().size() == context_before + 2);
    for (const auto& e : h.session->history().entries()) CHECK(e.type != "compaction");
    CHECK(h.types().back() == "agent_settled");
    CHECK(h.of("agent_settled").size() == 2);
}

TEST_CASE(
    "fixed bug: a followUp sent after abort() but before the settle runs before the settle, not "
    "inside the next prompt (seed 29557)",
    "[chaos][regression]") {
    coagent::test::harness h(
        R"([{"toolCall":{"name":"slow","arguments":{}}},{"text":"after the tool"},
        {"text":"next answer"},{"text":"spare"}])");
    // runs for 10 ms of virtual time, abort() or not (abort() interrupts a tool that takes
    // cancellation: issue 21)
    register_stubborn_tool(*h.session);
    h.prompt("first");
    REQUIRE(h.session->is_busy());  // the tool runs for 10 ms
    h.session->abort();
    std::optional<prompt_result> late;
    h.prompt_into("late follow-up", streaming_behavior::follow_up, late);
    CHECK(h.session->pending_message_count() == 1);
    h.advance(std::chrono::milliseconds(10));
    REQUIRE(h.done());
    REQUIRE(late);  // completed at the settle...
    CHECK(h.session->pending_message_count() == 0);
    // ... after its message ran, before that settle: the aborted run, then the follow-up's run
    auto b = coagent::test::brief(h.events);
    CHECK(std::count(b.begin(), b.end(), "agent_settled") == 1);
    CHECK(b.back() == "agent_settled");
    std::size_t late_at = 0, aborted_end_at = 0;
    for (std::size_t i = 0; i < h.events.size(); ++i) {
        const auto& e = h.events[i];
        if (e.at("type") == "message_end" && e.at("message").at("role") == "user" &&
            e.at("message").at("content").at(0).at("text") == "late follow-up")
            late_at = i;
        if (e.at("type") == "agent_end" && aborted_end_at == 0) aborted_end_at = i;
    }
    CHECK(aborted_end_at > 0);
    CHECK(late_at > aborted_end_at);
    // abort() ended the first prompt's run: it completes aborted; the follow-up has its own result
    CHECK(h.result->outcome == prompt_result::status::aborted);
    CHECK(late->outcome == prompt_result::status::succeeded);
    REQUIRE(late->last_assistant);
    CHECK(text_of(*late->last_assistant) == "after the tool");
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[1].messages.back().text == "late follow-up");

    const auto settled_at = h.events.size();
    std::optional<prompt_result> next;
    h.prompt_into("next prompt", streaming_behavior::none, next);
    h.advance(std::chrono::milliseconds(5));
    REQUIRE(next);
    CHECK(next->outcome == prompt_result::status::succeeded);
    // the late follow-up's message does not run again inside the next prompt
    int ghost = 0;
    for (std::size_t i = settled_at; i < h.events.size(); ++i)
        if (h.events[i].at("type") == "message_end" &&
            h.events[i].at("message").at("role") == "user" &&
            h.events[i].at("message").at("content").at(0).at("text") == "late follow-up")
            ++ghost;
    CHECK(ghost == 0);
}

TEST_CASE(
    "abort() drops the follow-ups queued before it, one queued after it still runs before the "
    "settle",
    "[chaos][regression]") {
    coagent::test::harness h(
        R"([{"toolCall":{"name":"slow","arguments":{}}},{"text":"after the tool"},{"text":"spare"}])");
    register_slow_tool(*h.session);  // runs for 10 ms of virtual time
    h.prompt("first");
    std::optional<prompt_result> before, steered_after;
    h.prompt_into("queued before the abort", streaming_behavior::follow_up, before);
    h.session->abort();
    h.prompt_into("steered after the abort", streaming_behavior::steer, steered_after);
    h.advance(std::chrono::milliseconds(10));
    REQUIRE(h.done());
    REQUIRE(before);
    REQUIRE(steered_after);
    CHECK(before->outcome == prompt_result::status::aborted);  // dropped by abort()
    CHECK(h.result->outcome == prompt_result::status::aborted);
    CHECK(steered_after->outcome == prompt_result::status::succeeded);
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[1].messages.back().text == "steered after the abort");
    for (const auto& r : reqs)
        for (const auto& m : r.messages) CHECK(m.text != "queued before the abort");
    CHECK(h.of("agent_settled").size() == 1);
    CHECK(h.session->pending_message_count() == 0);
}

TEST_CASE("chaos regression: seed 110, abort() after a faux delay completed (was a use-after-free)",
          "[chaos][regression]") {
    stats st;
    CHECK(run_seed(110, false, st, /*guard_abort=*/false, /*extended=*/false)
              .empty());  // prints the trace only on failure
}
