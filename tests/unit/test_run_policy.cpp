// The run policy as plain code (session/run_policy.hpp): what the session does when a run
// ends, told as tables of inputs → (events, next action), with no io_context. The rule ids are
// docs/retry-policy.md's; the same rules seen through a whole session are in test_session.cpp.

#include <coagent/session/run_policy.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace coagent;

namespace {

using kind = run_action::kind;
using strings = std::vector<std::string>;

// the events the policy emits, briefly: type and the fields the rules are about
struct recorder final : event_sink {
    strings seen;
    void operator()(event e) override {
        std::visit(
            [&](const auto& x) {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, agent_end_event>)
                    seen.push_back(std::string("agent_end{") + (x.will_retry ? "retry" : "final") +
                                   "}");
                else if constexpr (std::is_same_v<T, auto_retry_start_event>)
                    seen.push_back("auto_retry_start{" + std::to_string(x.attempt) + "/" +
                                   std::to_string(x.max_attempts) + "," +
                                   std::to_string(x.delay_ms) + "," + x.error_message + "}");
                else if constexpr (std::is_same_v<T, auto_retry_end_event>)
                    seen.push_back(std::string("auto_retry_end{") + (x.success ? "ok" : "fail") +
                                   "," + std::to_string(x.attempt) +
                                   (x.final_error ? "," + *x.final_error : std::string()) + "}");
                else if constexpr (std::is_same_v<T, compaction_end_event>)
                    seen.push_back("compaction_end{" + x.reason + "," +
                                   x.error_message.value_or("") + "}");
                else if constexpr (std::is_same_v<T, retry_fallback_applied_event>)
                    seen.push_back("retry_fallback_applied{" + x.from + "," + x.to + "," + x.role +
                                   "}");
                else if constexpr (std::is_same_v<T, retry_fallback_succeeded_event>)
                    seen.push_back("retry_fallback_succeeded{" + x.model + "," + x.role + "}");
                else
                    seen.push_back("other");
            },
            e);
    }
    strings take() { return std::exchange(seen, {}); }
};

message_ptr reply(stop_reason stop, std::string error = {}) {
    auto m = std::make_shared<message>();
    m->role = message_role::assistant;
    m->stop = stop;
    m->provider = "p";
    m->model = "m";
    if (!error.empty()) m->error_message = std::move(error);
    return m;
}
message_ptr failed(std::string error = "503 overloaded") {
    return reply(stop_reason::error, std::move(error));
}
message_ptr ok() {
    return reply(stop_reason::stop);
}

classification of(error_kind k) {
    classification c;
    c.kind = k;
    return c;
}

run_end ended(message_ptr last, error_kind k = error_kind::none) {
    run_end in;
    in.added = {last};
    in.last = std::move(last);
    in.cls = of(k);
    return in;
}

// a policy with a driver that feeds it one run's reply (message_end, then agent_end)
struct fixture {
    run_policy policy;
    settings s;
    recorder out;

    run_action run(run_end in) {
        if (in.last) policy.on_reply_end(*in.last, out);
        return policy.on_run_end(std::move(in), s, out);
    }
    run_action run(message_ptr last, error_kind k = error_kind::none) {
        return run(ended(std::move(last), k));
    }
    /// A prompt whose first attempt failed retryably and whose retry 1 now streams.
    void retrying() {
        policy.begin_prompt();
        run(failed(), error_kind::retryable);
        policy.on_wait_done(true, false, out);
        out.take();
    }
    /// A prompt whose first attempt hit a usage limit, and no credential switched.
    run_action no_credential(bool can_fall_back) {
        policy.begin_prompt();
        run_end in = ended(failed("usage limit reached"), error_kind::usage_limit);
        in.can_fall_back = can_fall_back;
        REQUIRE(run(std::move(in)).what == kind::switch_credential);
        return policy.on_credential_switch(false, s, out);
    }
};

// A limit store whose budget answers are scripted; it records what the policy told it.
struct fake_store final : limit_store {
    std::vector<bool> answers;  // budget_on_failure's, in order (then: allowed)
    strings calls;
    bool budget_on_failure(std::string_view provider, const retry_budget_settings& b) override {
        calls.push_back("failure:" + std::string(provider) + "/" + std::to_string(b.max_tokens));
        if (answers.empty()) return true;
        const bool a = answers.front();
        answers.erase(answers.begin());
        return a;
    }
    void budget_on_success(std::string_view provider, const retry_budget_settings& b) override {
        calls.push_back("success:" + std::string(provider) + "/" +
                        std::to_string(b.token_ratio_milli));
    }
    std::vector<budget_level> budget_levels() const override { return {}; }
    void block_credential(std::string_view, std::string_view, std::int64_t, std::int64_t) override {
    }
    std::int64_t credential_blocked_until(std::string_view, std::string_view) const override {
        return 0;
    }
    void cool_down_model(std::string_view, std::int64_t, std::int64_t) override {}
    std::int64_t model_cooldown_until(std::string_view) const override { return 0; }
    std::vector<credential_block> credential_blocks(std::int64_t) const override { return {}; }
    std::vector<model_cooldown> model_cooldowns(std::int64_t) const override { return {}; }
    void lease_credential(std::string_view, std::string_view, std::string_view) override {}
    void release_credential(std::string_view, std::string_view) override {}
    std::int64_t credential_sessions(std::string_view, std::string_view) const override {
        return 0;
    }
    std::vector<credential_lease_count> credential_leases() const override { return {}; }
    void clear(std::optional<std::string_view>) override {}
    std::string_view kind() const noexcept override { return "fake"; }
    bool connected() const noexcept override { return true; }
};

// a fixture whose runs go through the fake store, with retry.budget on
struct budget_fixture : fixture {
    fake_store store;
    budget_fixture() { s.budget.enabled = true; }
    run_action run(message_ptr last, error_kind k = error_kind::none) {
        run_end in = ended(std::move(last), k);
        in.budget = &store;
        if (in.last) policy.on_reply_end(*in.last, out, &store, s.budget);
        return policy.on_run_end(std::move(in), s, out);
    }
};

}  // namespace

TEST_CASE("run policy §3.T1: two errors then success, events and actions in order",
          "[run_policy][spec-3][spec-4][spec-7]") {
    fixture f;
    CHECK(f.policy.begin_prompt().what == kind::run);
    run_action a = f.run(failed(), error_kind::retryable);
    CHECK(f.out.take() == strings{"agent_end{retry}", "auto_retry_start{1/3,2000,503 overloaded}"});
    REQUIRE(a.what == kind::wait);
    CHECK(a.delay_ms == 2000);
    CHECK(a.drop_failed_reply);  // §3.9: after the start event, which is already out
    CHECK(f.policy.machine().is_retrying());
    CHECK(f.policy.on_wait_done(true, false, f.out).what == kind::run);  // §3.11
    CHECK(f.out.take().empty());

    a = f.run(failed(), error_kind::retryable);
    CHECK(f.out.take() == strings{"agent_end{retry}", "auto_retry_start{2/3,4000,503 overloaded}"});
    CHECK(a.delay_ms == 4000);
    CHECK(f.policy.on_wait_done(true, false, f.out).what == kind::run);

    a = f.run(ok());
    // §3.12: the end right after the successful message_end, before the run's agent_end
    CHECK(f.out.take() == strings{"auto_retry_end{ok,2}", "agent_end{final}"});
    REQUIRE(a.what == kind::settle);
    CHECK(a.has_result);
    CHECK(f.policy.result().outcome == prompt_result::status::succeeded);
    CHECK_FALSE(f.policy.machine().is_retrying());
    CHECK(f.policy.machine().attempt() == 0);
}

TEST_CASE("run policy §1: retry first, then the compaction decisions", "[run_policy][spec-1]") {
    struct row {
        const char* name;
        error_kind k;
        bool over_threshold;
        bool compaction_enabled;
        bool abort_requested;
        kind want;
        compaction_reason reason;
        bool resume;
    };
    const row rows[] = {
        // §1.3: a retry that starts skips the compaction check, above the threshold too
        {"retry starts", error_kind::retryable, true, true, false, kind::wait,
         compaction_reason::overflow, false},
        // §1.4, §1.5: an overflow is compacted, and the turn goes on
        {"overflow", error_kind::context_overflow, false, true, false, kind::compact,
         compaction_reason::overflow, true},
        // §1.6: no compaction of either kind
        {"overflow, compaction off", error_kind::context_overflow, false, false, false,
         kind::settle, compaction_reason::overflow, false},
        {"threshold, compaction off", error_kind::none, true, false, false, kind::settle,
         compaction_reason::overflow, false},
        {"threshold", error_kind::none, true, true, false, kind::compact,
         compaction_reason::threshold, false},
        {"threshold after an abort", error_kind::none, true, true, true, kind::settle,
         compaction_reason::overflow, false},
        {"below threshold", error_kind::none, false, true, false, kind::settle,
         compaction_reason::overflow, false},
    };
    for (const row& r : rows) {
        CAPTURE(r.name);
        fixture f;
        f.s.compaction.enabled = r.compaction_enabled;
        f.policy.begin_prompt();
        run_end in = ended(r.k == error_kind::none ? ok() : failed("x"), r.k);
        in.over_threshold = r.over_threshold;
        in.abort_requested = r.abort_requested;
        const run_action a = f.run(std::move(in));
        CHECK(a.what == r.want);
        if (a.what == kind::compact) {
            CHECK(a.reason == r.reason);
            CHECK(a.resume == r.resume);
        }
    }
}

TEST_CASE("run policy §1.3: a chain that just ended in failure is not compacted on threshold",
          "[run_policy][spec-1]") {
    fixture f;
    f.s.retry.max_retries = 1;
    f.policy.begin_prompt();
    f.run(failed(), error_kind::retryable);
    f.policy.on_wait_done(true, false, f.out);
    f.out.take();
    run_end in = ended(failed("400 bad request"), error_kind::none);
    in.over_threshold = true;
    CHECK(f.run(std::move(in)).what == kind::settle);
    CHECK(f.out.take() == strings{"agent_end{final}", "auto_retry_end{fail,1,400 bad request}"});
}

TEST_CASE("run policy §1.7: one overflow recovery per prompt, §1.5 the continue",
          "[run_policy][spec-1]") {
    fixture f;
    f.policy.begin_prompt();
    run_action a = f.run(failed("prompt is too long"), error_kind::context_overflow);
    CHECK(f.out.take() == strings{"agent_end{final}"});
    REQUIRE(a.what == kind::compact);
    CHECK(a.resume);
    CHECK(f.policy.on_compaction_done(true, false).what == kind::run);  // the turn continues once
    a = f.run(failed("prompt is too long"), error_kind::context_overflow);
    CHECK(a.what == kind::settle);
    CHECK(f.out.take() ==
          strings{"agent_end{final}",
                  "compaction_end{overflow,Context overflow recovery failed after one "
                  "compact-and-retry attempt. Try reducing the context (start a new session) or "
                  "switching to a model with a larger context window.}"});
    CHECK(f.policy.result().outcome == prompt_result::status::failed);
    CHECK(f.policy.result().error == "prompt is too long");

    // a failed compaction does not continue; the next prompt may recover again
    f.policy.begin_prompt();
    a = f.run(failed("prompt is too long"), error_kind::context_overflow);
    REQUIRE(a.what == kind::compact);
    CHECK(f.policy.on_compaction_done(false, false).what == kind::settle);
    // a silent overflow (a reply that succeeded) is compacted without continuing
    f.policy.begin_prompt();
    a = f.run(ok(), error_kind::context_overflow);
    REQUIRE(a.what == kind::compact);
    CHECK_FALSE(a.resume);
    CHECK(f.policy.on_compaction_done(true, false).what == kind::settle);
}

TEST_CASE("run policy §3.E: every chain ending, its event and the prompt's result",
          "[run_policy][spec-3][spec-5][spec-7]") {
    SECTION("§3.E1 success") {
        fixture f;
        f.retrying();
        f.run(ok());
        CHECK(f.out.take() == strings{"auto_retry_end{ok,1}", "agent_end{final}"});
        CHECK(f.policy.result().outcome == prompt_result::status::succeeded);
    }
    SECTION("§3.E2 exhausted: attempt = counter - 1 (§4.1, §4.3)") {
        fixture f;
        f.policy.begin_prompt();
        for (int i = 0; i < 3; ++i) {
            REQUIRE(f.run(failed(), error_kind::retryable).what == kind::wait);
            f.policy.on_wait_done(true, false, f.out);
        }
        f.out.take();
        f.s.retry.max_retries = 2;  // §3.1: read again at every agent_end
        CHECK(f.run(failed("502"), error_kind::retryable).what == kind::settle);
        CHECK(f.out.take() == strings{"agent_end{final}", "auto_retry_end{fail,3,502}"});
        CHECK(f.policy.result().outcome == prompt_result::status::failed);
        CHECK(f.policy.result().error == "502");
    }
    SECTION("§3.E3 abort_retry in the backoff, and §5.6 a cancel after the timer fired") {
        for (bool fired : {false, true}) {
            CAPTURE(fired);
            fixture f;
            f.policy.begin_prompt();
            f.run(failed(), error_kind::retryable);
            f.out.take();
            const control_effect e = f.policy.abort_retry();
            CHECK(e.cancel_wait);
            CHECK_FALSE(e.abort_stream);
            CHECK(f.policy.on_wait_done(fired, false, f.out).what == kind::settle);
            CHECK(f.out.take() == strings{"auto_retry_end{fail,1,Retry cancelled}"});
            const prompt_result r = f.policy.result();
            CHECK(r.outcome == prompt_result::status::failed);
            CHECK(r.error == "Retry cancelled");
            CHECK_FALSE(f.policy.machine().is_retrying());
        }
    }
    SECTION("§3.E3 with abort(): the same end, the prompt is aborted (§5.3, §5.7)") {
        fixture f;
        f.policy.begin_prompt();
        f.run(failed(), error_kind::retryable);
        f.out.take();
        const control_effect e = f.policy.abort();
        CHECK(e.cancel_wait);
        CHECK(e.abort_stream);
        CHECK(f.policy.on_wait_done(false, false, f.out).what == kind::settle);
        CHECK(f.out.take() == strings{"auto_retry_end{fail,1,Retry cancelled}"});
        CHECK(f.policy.result().outcome == prompt_result::status::aborted);
        CHECK(f.policy.result().error == "Retry cancelled");
    }
    SECTION("§3.E4 abort_retry while a retried attempt streams: that attempt is aborted (§5.4)") {
        fixture f;
        f.retrying();
        const control_effect e = f.policy.abort_retry();
        CHECK_FALSE(e.cancel_wait);
        CHECK(e.abort_stream);
        run_end in = ended(reply(stop_reason::aborted, "Request was aborted"));
        in.abort_requested = true;
        CHECK(f.run(std::move(in)).what == kind::settle);
        CHECK(f.out.take() ==
              strings{"agent_end{final}", "auto_retry_end{fail,1,Retry cancelled}"});
        CHECK(f.policy.result().outcome == prompt_result::status::failed);
        CHECK(f.policy.result().error == "Retry cancelled");
    }
    SECTION("§3.E5 a non-retryable error ends the chain with that error") {
        fixture f;
        f.retrying();
        CHECK(f.run(failed("401 unauthorized"), error_kind::none).what == kind::settle);
        CHECK(f.out.take() ==
              strings{"agent_end{final}", "auto_retry_end{fail,1,401 unauthorized}"});
    }
    SECTION("§3.E6 a retried attempt overflows: the end, then the compaction path") {
        fixture f;
        f.retrying();
        const run_action a = f.run(failed("prompt is too long"), error_kind::context_overflow);
        CHECK(f.out.take() ==
              strings{"agent_end{final}", "auto_retry_end{fail,1,prompt is too long}"});
        CHECK(a.what == kind::compact);
        CHECK(a.reason == compaction_reason::overflow);
    }
    SECTION(
        "§3.E7 retry.enabled turned off during the wait: the wait goes on, the next failure ends "
        "the chain") {
        fixture f;
        f.policy.begin_prompt();
        f.run(failed(), error_kind::retryable);
        f.s.retry.enabled = false;
        CHECK(f.policy.on_wait_done(true, false, f.out).what == kind::run);  // §8.10
        f.out.take();
        CHECK(f.run(failed("503 again"), error_kind::retryable).what == kind::settle);
        CHECK(f.out.take() == strings{"agent_end{final}", "auto_retry_end{fail,1,503 again}"});
    }
}

TEST_CASE("run policy §3.2, §4.7: no chain, no retry events, maxRetries 0 ends without a start",
          "[run_policy][spec-3][spec-4]") {
    fixture f;
    f.s.retry.enabled = false;
    f.policy.begin_prompt();
    CHECK(f.run(failed(), error_kind::retryable).what == kind::settle);
    CHECK(f.out.take() == strings{"agent_end{final}"});

    fixture z;
    z.s.retry.max_retries = 0;
    z.policy.begin_prompt();
    CHECK(z.run(failed(), error_kind::retryable).what == kind::settle);
    CHECK(z.out.take() == strings{"agent_end{final}", "auto_retry_end{fail,0,503 overloaded}"});
    // §10.7: nothing carries over; the next chain starts at attempt 1 with the base delay
    z.s.retry.max_retries = 3;
    z.policy.begin_prompt();
    const run_action a = z.run(failed(), error_kind::retryable);
    CHECK(a.delay_ms == 2000);
    CHECK(z.out.take() == strings{"agent_end{retry}", "auto_retry_start{1/3,2000,503 overloaded}"});
}

TEST_CASE("run policy §5.5: abort_retry with no retry pending does nothing",
          "[run_policy][spec-5]") {
    fixture f;
    f.policy.begin_prompt();  // a first attempt streams
    const control_effect e = f.policy.abort_retry();
    CHECK_FALSE(e.cancel_wait);
    CHECK_FALSE(e.abort_stream);
    // and the first attempt's retryable error still starts a chain
    CHECK(f.run(failed(), error_kind::retryable).what == kind::wait);
    CHECK(f.policy.retry_now());  // a backoff runs now
}

TEST_CASE("run policy: retry_now ends the wait as if it had elapsed, not after abort_retry",
          "[run_policy][spec-5]") {
    fixture f;
    f.policy.begin_prompt();
    CHECK_FALSE(f.policy.retry_now());  // no backoff
    f.run(failed(), error_kind::retryable);
    f.out.take();
    CHECK(f.policy.retry_now());
    CHECK(f.policy.on_wait_done(false, false, f.out).what == kind::run);  // the cancelled timer
    CHECK(f.out.take().empty());        // no end: the chain goes on
    CHECK_FALSE(f.policy.retry_now());  // the attempt streams
    f.run(failed(), error_kind::retryable);
    f.out.take();
    f.policy.abort_retry();
    CHECK_FALSE(f.policy.retry_now());  // a cancelled wait stays cancelled
    CHECK(f.policy.on_wait_done(false, false, f.out).what == kind::settle);
    CHECK(f.out.take() == strings{"auto_retry_end{fail,2,Retry cancelled}"});
}

TEST_CASE("run policy §3.7, §11.14: usage limit — credential first, then model fallback",
          "[run_policy][spec-3][spec-11]") {
    const auto chains = [] {
        settings s;
        using chain_list = std::vector<std::pair<std::string, std::vector<std::string>>>;
        s.retry.fallback = std::make_shared<const chain_list>(chain_list{{"default", {"q/n"}}});
        return s;
    };
    SECTION("a credential switch: the wait becomes 0, no event before the answer") {
        fixture f;
        f.policy.begin_prompt();
        run_action a = f.run(failed("usage limit reached"), error_kind::usage_limit);
        CHECK(a.what == kind::switch_credential);
        CHECK(f.out.take().empty());  // agent_end waits for the answer: its willRetry depends on it
        a = f.policy.on_credential_switch(true, f.s, f.out);
        CHECK(f.out.take() ==
              strings{"agent_end{retry}", "auto_retry_start{1/3,0,usage limit reached}"});
        CHECK(a.what == kind::wait);
        CHECK(a.delay_ms == 0);
    }
    SECTION("no credential, no catalog: the spec's backoff") {
        fixture f;
        f.s = chains();
        const run_action a = f.no_credential(false);
        CHECK(a.what == kind::wait);
        CHECK(a.delay_ms == 2000);
    }
    SECTION("no credential, a fallback model: switch at once, report its success once (§9.10)") {
        fixture f;
        f.s = chains();
        run_action a = f.no_credential(true);
        REQUIRE(a.what == kind::switch_model);
        CHECK(f.out.take().empty());
        a = f.policy.on_model_switch(retry_fallback_applied_event{"p/m", "q/n", "default"}, f.s,
                                     f.out);
        CHECK(f.out.take() == strings{"agent_end{retry}", "retry_fallback_applied{p/m,q/n,default}",
                                      "auto_retry_start{1/3,0,usage limit reached}"});
        CHECK(a.delay_ms == 0);
        f.policy.on_wait_done(true, false, f.out);
        auto good = std::make_shared<message>(*ok());
        good->provider = "q";
        good->model = "n";
        f.run(good);
        CHECK(f.out.take() == strings{"retry_fallback_succeeded{q/n,default}",
                                      "auto_retry_end{ok,1}", "agent_end{final}"});
    }
    SECTION("a fallback whose chain was cancelled reports no success later") {
        fixture f;
        f.s = chains();
        f.no_credential(true);
        f.policy.on_model_switch(retry_fallback_applied_event{"p/m", "q/n", "default"}, f.s, f.out);
        f.policy.abort_retry();
        f.policy.on_wait_done(false, false, f.out);
        f.out.take();
        f.policy.begin_prompt();
        f.run(failed(), error_kind::retryable);
        f.policy.on_wait_done(true, false, f.out);
        f.out.take();
        f.run(ok());
        CHECK(f.out.take() == strings{"auto_retry_end{ok,1}", "agent_end{final}"});
    }
    SECTION("no fallback model found: the backoff") {
        fixture f;
        f.s = chains();
        REQUIRE(f.no_credential(true).what == kind::switch_model);
        const run_action a = f.policy.on_model_switch(std::nullopt, f.s, f.out);
        CHECK(a.delay_ms == 2000);
        CHECK(f.out.take() ==
              strings{"agent_end{retry}", "auto_retry_start{1/3,2000,usage limit reached}"});
    }
}

TEST_CASE("run policy §7: queued messages run before the settle, one result per prompt",
          "[run_policy][spec-7][spec-5]") {
    SECTION("a follow-up: run_queued, then the next prompt runs; the settle has a result") {
        fixture f;
        f.policy.begin_prompt();
        run_end in = ended(ok());
        in.has_queued = true;
        run_action a = f.run(std::move(in));
        REQUIRE(a.what == kind::run_queued);
        CHECK_FALSE(a.has_result);  // nothing aborted: the prompt completes at the settle
        CHECK(f.policy.begin_next().what == kind::run);
        a = f.run(failed("401"), error_kind::none);
        REQUIRE(a.what == kind::settle);
        CHECK(a.has_result);
        CHECK(f.policy.result().outcome == prompt_result::status::failed);
    }
    SECTION("abort_retry: the queued follow-ups still run (§5.7)") {
        fixture f;
        f.policy.begin_prompt();
        f.run(failed(), error_kind::retryable);
        f.policy.abort_retry();
        const run_action a = f.policy.on_wait_done(false, true, f.out);
        CHECK(a.what == kind::run_queued);
        CHECK_FALSE(a.has_result);
    }
    SECTION(
        "abort() then a message queued while the run wound down: the aborted prompt's result "
        "first, and the next prompt is not aborted") {
        fixture f;
        f.policy.begin_prompt();
        f.policy.abort();
        run_end in = ended(reply(stop_reason::aborted, "Request was aborted"));
        in.abort_requested = true;
        in.has_queued = true;
        const run_action a = f.run(std::move(in));
        REQUIRE(a.what == kind::run_queued);
        CHECK(a.has_result);
        CHECK(f.policy.result().outcome == prompt_result::status::aborted);
        f.policy.begin_next();
        f.run(ok());
        CHECK(f.policy.result().outcome == prompt_result::status::succeeded);
    }
    SECTION("a hand-over after a manual compaction with nothing left to run") {
        fixture f;
        f.policy.begin_compaction();
        run_action a = f.policy.begin_handover(false);
        CHECK(a.what == kind::settle);
        CHECK_FALSE(a.has_result);  // nothing ran: the prompts keep the last result
        a = f.policy.begin_handover(true);
        CHECK(a.what == kind::run_queued);
    }
    SECTION("abort() cuts a tool turn short: aborted, not succeeded") {
        fixture f;
        f.policy.begin_prompt();
        f.policy.abort();
        f.run(reply(stop_reason::tool_use));
        CHECK(f.policy.result().outcome == prompt_result::status::aborted);
    }
}

TEST_CASE("run policy §1.8: a compaction's summary request is a chain of its own",
          "[run_policy][spec-1][spec-5]") {
    fixture f;
    f.policy.begin_prompt();
    REQUIRE(f.run(failed("prompt is too long"), error_kind::context_overflow).what ==
            kind::compact);
    f.out.take();

    CHECK(f.policy.begin_summary().what == kind::run);
    run_action a = f.run(failed(), error_kind::retryable);
    // no agent_end inside a compaction, and the summary's failure is not in the context
    CHECK(f.out.take() == strings{"auto_retry_start{1/3,2000,503 overloaded}"});
    REQUIRE(a.what == kind::wait);
    CHECK_FALSE(a.drop_failed_reply);
    CHECK(f.policy.on_wait_done(true, false, f.out).what == kind::run);
    a = f.run(ok());
    CHECK(f.out.take() == strings{"auto_retry_end{ok,1}"});
    CHECK(a.what == kind::summary_done);
    CHECK_FALSE(f.policy.summary_cancelled());

    // the outer prompt goes on where it was: the compaction continues the turn
    CHECK(f.policy.on_compaction_done(true, false).what == kind::run);
    CHECK(f.run(ok()).what == kind::settle);
    CHECK(f.out.take() == strings{"agent_end{final}"});

    SECTION("§5.8: abort_retry in the summary's backoff fails the compaction") {
        f.policy.begin_prompt();
        f.run(failed("prompt is too long"), error_kind::context_overflow);
        f.policy.begin_summary();
        f.run(failed(), error_kind::retryable);
        f.out.take();
        f.policy.abort_retry();
        CHECK(f.policy.on_wait_done(false, false, f.out).what == kind::summary_done);
        CHECK(f.out.take() == strings{"auto_retry_end{fail,1,Retry cancelled}"});
        CHECK(f.policy.summary_cancelled());
        const auto fail = f.policy.compaction_failed(false, false, "x", false);
        CHECK_FALSE(fail.aborted);
        CHECK(fail.error == "x");
        // the overflow's prompt completes failed with the overflow's error, not "Retry cancelled"
        CHECK(f.policy.on_compaction_done(false, false).what == kind::settle);
        CHECK(f.policy.result().outcome == prompt_result::status::failed);
        CHECK(f.policy.result().error == "prompt is too long");
    }
}

TEST_CASE("run policy §5.8: how a compaction without a summary ends", "[run_policy][spec-5]") {
    fixture f;
    f.policy.begin_compaction();
    auto r = f.policy.compaction_failed(false, true, "hook aborted", false);
    CHECK(r.aborted);
    CHECK(r.error == "hook aborted");
    // abort_retry() aborted a retried summary attempt: failed, whatever the hook said
    r = f.policy.compaction_failed(false, true, "hook aborted", true);
    CHECK_FALSE(r.aborted);
    CHECK(r.error == "Compaction failed: Retry cancelled");
    f.policy.abort();
    r = f.policy.compaction_failed(true, false, "", true);
    CHECK(r.aborted);
    CHECK(r.error == "Compaction aborted");
    r = f.policy.compaction_failed(false, false, "network down", true);
    CHECK(r.aborted);
    CHECK(r.error == "network down");
}

TEST_CASE("retry machine: the chain ending is a value (§3.E)", "[run_policy][spec-3]") {
    retry_machine m;
    retry_settings s;
    const auto err = *failed();
    auto d = m.on_agent_end(&err, of(error_kind::retryable), s);
    REQUIRE(d.will_retry);
    CHECK(d.ending == chain_end::none);
    m.begin_wait();
    m.on_wait_done(true);
    s.enabled = false;
    d = m.on_agent_end(&err, of(error_kind::retryable), s);
    CHECK(d.ending == chain_end::disabled);
    s.enabled = true;
    m.on_agent_end(&err, of(error_kind::retryable), s);
    m.begin_wait();
    m.on_wait_done(true);
    d = m.on_agent_end(&err, of(error_kind::context_overflow), s);
    CHECK(d.ending == chain_end::overflowed);
    m.on_agent_end(&err, of(error_kind::retryable), s);
    m.begin_wait();
    m.on_wait_done(true);
    d = m.on_agent_end(&err, of(error_kind::none), s);
    CHECK(d.ending == chain_end::failed);
    m.on_agent_end(&err, of(error_kind::retryable), s);
    m.begin_wait();
    CHECK(m.abort_retry());
    CHECK(m.on_wait_done(false).ending == chain_end::cancelled_waiting);
    s.max_retries = 0;
    CHECK(m.on_agent_end(&err, of(error_kind::retryable), s).ending == chain_end::exhausted);
}

TEST_CASE("run policy §7.6: a user message during a backoff ends the wait, the chain goes on",
          "[run_policy][spec-7]") {
    fixture f;
    f.policy.begin_prompt();
    CHECK_FALSE(f.policy.backoff_running());  // a first attempt streams
    f.run(failed(), error_kind::retryable);
    f.out.take();
    REQUIRE(f.policy.backoff_running());
    CHECK(f.policy.retry_now());
    // the cancelled timer resumes: no end, the next attempt is the chain's retry 1
    CHECK(f.policy.on_wait_done(false, false, f.out).what == kind::run);
    CHECK(f.out.take().empty());
    CHECK(f.policy.machine().attempt() == 1);
    CHECK_FALSE(f.policy.backoff_running());
    f.run(ok());
    CHECK(f.out.take() == strings{"auto_retry_end{ok,1}", "agent_end{final}"});
    // after abort_retry() a message cannot join: the wait stays cancelled
    fixture g;
    g.policy.begin_prompt();
    g.run(failed(), error_kind::retryable);
    g.policy.abort_retry();
    CHECK_FALSE(g.policy.backoff_running());
    CHECK_FALSE(g.policy.retry_now());
}

// ---- the parts agent_session and rpc_client are made of ------------------------------------

#include <coagent/runtime/latch.hpp>
#include <coagent/runtime/listener_list.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

TEST_CASE("listener_list: order, removal and addition during dispatch, guarded subscriptions",
          "[parts]") {
    listener_list<int> list;
    std::vector<std::string> calls;
    subscription b;
    subscription added;
    subscription a = list.add([&](int v) {
        calls.push_back("a" + std::to_string(v));
        b.reset();  // removes a later listener while dispatching: it is not called
        if (v == 1) added = list.add([&](int w) { calls.push_back("new" + std::to_string(w)); });
    });
    b = list.add([&](int v) { calls.push_back("b" + std::to_string(v)); });
    list.dispatch(1);
    // a listener added during a dispatch is called in that dispatch, after the others
    CHECK(calls == std::vector<std::string>{"a1", "new1"});
    calls.clear();
    a.reset();
    list.dispatch(2);
    CHECK(calls == std::vector<std::string>{"new2"});
    CHECK_FALSE(list.empty());
    added.reset();
    CHECK(list.empty());

    // a guarded subscription may outlive its list
    subscription late;
    {
        auto owner = std::make_shared<listener_list<int>>();
        late = owner->add([](int) {}, std::weak_ptr<void>(owner));
    }
    late.reset();  // the list is gone: nothing happens (ASan would catch a use after free)
}

TEST_CASE("latch: a wake before the wait is kept, wait_for reports a timeout", "[parts]") {
    boost::asio::io_context io;
    latch early(io.get_executor());
    early.wake();
    bool woke = false;
    // named: the coroutine refers to the closure's captures, which must outlive io.run()
    const auto wait_early = [&]() -> boost::asio::awaitable<void> {
        co_await early.wait();
        woke = true;
    };
    boost::asio::co_spawn(io, wait_early, [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
    io.run();
    CHECK(woke);

    io.restart();
    latch never(io.get_executor());
    std::optional<bool> timed_out;
    const auto wait_never = [&]() -> boost::asio::awaitable<void> {
        timed_out = co_await never.wait_for(std::chrono::milliseconds(1));
    };
    boost::asio::co_spawn(io, wait_never, [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
    io.run();
    CHECK(timed_out == true);
    CHECK_FALSE(never.woken());
}

TEST_CASE("run policy, retry.budget (gRFC A6): what the budget is told and what a refusal ends",
          "[run_policy][budget][issue-19]") {
    SECTION("off (the default): the store is never told, the chain is the spec's") {
        budget_fixture f;
        f.s.budget.enabled = false;
        f.policy.begin_prompt();
        f.store.answers = {false};
        CHECK(f.run(failed(), error_kind::retryable).what == kind::wait);
        CHECK(f.out.take() ==
              strings{"agent_end{retry}", "auto_retry_start{1/3,2000,503 overloaded}"});
        f.policy.on_wait_done(true, false, f.out);
        CHECK(f.run(ok()).what == kind::settle);
        CHECK(f.store.calls.empty());
    }
    SECTION("allowed: every retryable failure takes a token, every success adds one back") {
        budget_fixture f;
        f.policy.begin_prompt();
        CHECK(f.run(failed(), error_kind::retryable).what == kind::wait);
        f.policy.on_wait_done(true, false, f.out);
        CHECK(f.run(ok()).what == kind::settle);
        CHECK(f.out.take() == strings{"agent_end{retry}",
                                      "auto_retry_start{1/3,2000,503 overloaded}",
                                      "auto_retry_end{ok,1}", "agent_end{final}"});
        CHECK(f.store.calls == strings{"failure:p/10", "success:p/100"});
    }
    SECTION("refused at the first failure: an end without a start, attempt 0") {
        budget_fixture f;
        f.store.answers = {false};
        f.policy.begin_prompt();
        const run_action a = f.run(failed(), error_kind::retryable);
        CHECK(a.what == kind::settle);
        CHECK(a.has_result);
        CHECK(f.out.take() ==
              strings{"agent_end{final}",
                      "auto_retry_end{fail,0,503 overloaded (retry budget for p exhausted)}"});
        CHECK(f.policy.result().outcome == prompt_result::status::failed);
        CHECK(f.policy.result().error == "503 overloaded");
        CHECK_FALSE(f.policy.machine().is_retrying());
        CHECK(f.policy.machine().attempt() == 0);
    }
    SECTION("refused after two retries: attempt = the retries made, the chain is over") {
        budget_fixture f;
        f.store.answers = {true, true, false};
        f.policy.begin_prompt();
        f.run(failed(), error_kind::retryable);
        f.policy.on_wait_done(true, false, f.out);
        f.run(failed(), error_kind::retryable);
        f.policy.on_wait_done(true, false, f.out);
        f.out.take();
        CHECK(f.run(failed(), error_kind::retryable).what == kind::settle);
        CHECK(f.out.take() ==
              strings{"agent_end{final}",
                      "auto_retry_end{fail,2,503 overloaded (retry budget for p exhausted)}"});
        // the next prompt's chain starts afresh (the budget decides again)
        f.policy.begin_prompt();
        CHECK(f.run(failed(), error_kind::retryable).what == kind::wait);
        CHECK(f.out.take() ==
              strings{"agent_end{retry}", "auto_retry_start{1/3,2000,503 overloaded}"});
    }
    SECTION("exhausted by maxRetries: the budget is still told, the end is maxRetries'") {
        budget_fixture f;
        f.s.retry.max_retries = 0;
        f.store.answers = {false};
        f.policy.begin_prompt();
        f.run(failed(), error_kind::retryable);
        CHECK(f.out.take() == strings{"agent_end{final}", "auto_retry_end{fail,0,503 overloaded}"});
        CHECK(f.store.calls == strings{"failure:p/10"});
    }
    SECTION("not told: a usage limit (credentials switch), a non-retryable error, an abort") {
        budget_fixture f;
        f.store.answers = {false, false, false};
        f.policy.begin_prompt();
        CHECK(f.run(failed("usage limit reached"), error_kind::usage_limit).what ==
              kind::switch_credential);
        CHECK(f.policy.on_credential_switch(true, f.s, f.out).what == kind::wait);
        f.policy.on_wait_done(true, false, f.out);
        f.out.take();
        f.policy.begin_prompt();
        CHECK(f.run(failed("400 bad request"), error_kind::none).what == kind::settle);
        f.policy.begin_prompt();
        CHECK(f.run(reply(stop_reason::aborted, "Request was aborted")).what == kind::settle);
        CHECK(f.store.calls.empty());
    }
    SECTION("a compaction's summary request: its failures count as attempts") {
        budget_fixture f;
        f.store.answers = {false};
        f.policy.begin_compaction();
        CHECK(f.policy.begin_summary().what == kind::run);
        CHECK(f.run(failed(), error_kind::retryable).what == kind::summary_done);
        CHECK(f.out.take() ==
              strings{"auto_retry_end{fail,0,503 overloaded (retry budget for p exhausted)}"});
        CHECK(f.store.calls == strings{"failure:p/10"});
    }
}

TEST_CASE(
    "retry budget, gRFC A6 exactly: full at start, -1 a failure, +ratio a success, "
    "a retry only above half",
    "[budget][issue-19]") {
    retry_budget_settings s;
    s.enabled = true;  // maxTokens 10, tokenRatio 0.1
    retry_budget b(s);
    CHECK(b.tokens_milli() == 10000);
    CHECK(b.on_failure(s));        // 9
    CHECK(b.on_failure(s));        // 8
    CHECK(b.on_failure(s));        // 7
    CHECK(b.on_failure(s));        // 6
    CHECK_FALSE(b.on_failure(s));  // 5: not above 10 / 2
    CHECK(b.tokens_milli() == 5000);
    for (int i = 0; i < 9; ++i) b.on_success(s);
    CHECK(b.tokens_milli() == 5900);  // exact: thousandths, no float drift
    CHECK(b.allows_retry(s));
    CHECK_FALSE(b.on_failure(s));  // 4.9
    for (int i = 0; i < 10; ++i) CHECK_FALSE(b.on_failure(s));
    CHECK(b.tokens_milli() == 0);  // never below 0
    for (int i = 0; i < 1000; ++i) b.on_success(s);
    CHECK(b.tokens_milli() == 10000);  // never above maxTokens
    // an odd maxTokens: the threshold is 1.5, so 2 tokens allow a retry, 1 does not
    retry_budget_settings t;
    t.max_tokens = 3;
    t.token_ratio_milli = 500;
    retry_budget c(t);
    CHECK(c.on_failure(t));        // 2
    CHECK_FALSE(c.on_failure(t));  // 1
    c.on_success(t);               // 1.5: not above 1.5
    CHECK_FALSE(c.allows_retry(t));
    c.on_success(t);  // 2
    CHECK(c.allows_retry(t));
}

TEST_CASE("local_limit_store: one budget per provider, cleared one by one or all",
          "[budget][issue-19]") {
    retry_budget_settings s;
    s.enabled = true;
    s.max_tokens = 2;  // threshold 1: one failure already refuses
    local_limit_store store;
    CHECK(store.kind() == "local");
    CHECK(store.connected());
    CHECK_FALSE(store.budget_on_failure("a", s));
    CHECK(store.budget_on_failure("b", s) == false);
    store.budget_on_success("b", s);
    const auto levels = store.budget_levels();
    REQUIRE(levels.size() == 2);
    CHECK(levels[0].provider == "a");
    CHECK(levels[0].tokens_milli == 1000);
    CHECK(levels[1].tokens_milli == 1100);
    store.clear(std::string_view("a"));
    REQUIRE(store.budget_levels().size() == 1);
    CHECK(store.budget_levels()[0].provider == "b");
    store.clear(std::nullopt);
    CHECK(store.budget_levels().empty());
    CHECK_FALSE(store.budget_on_failure("b", s));  // full again (2), then 1: not above 1
    CHECK(process_limit_store() == process_limit_store());
    CHECK(process_limit_store()->kind() == "local");
}

TEST_CASE("retry.resumePartial: which failed replies a retry continues, trimmed (issue 21)",
          "[run_policy][issue-21]") {
    retry_settings on;
    on.resume_partial = true;
    const retry_settings off;
    const auto failed = [](std::vector<content_block> content,
                           stop_reason stop = stop_reason::error) {
        message m;
        m.role = message_role::assistant;
        m.stop = stop;
        m.content = std::move(content);
        return m;
    };
    const std::string anthropic = "anthropic-messages";
    const message text = failed({text_block{"Once upon "}, text_block{"a time \n\t "}});
    CHECK(partial_to_continue(text, anthropic, on, false) == "Once upon a time");
    CHECK(partial_to_continue(text, anthropic, off, false) == std::nullopt);  // opt-in
    CHECK(partial_to_continue(text, anthropic, on, true) == std::nullopt);    // rejected before
    CHECK(partial_to_continue(text, "openai-completions", on, false) ==
          std::nullopt);  // no prefill
    CHECK(partial_to_continue(text, "faux", on, false) == std::nullopt);
    CHECK(partial_to_continue(failed({}), anthropic, on, false) == std::nullopt);  // nothing
    CHECK(partial_to_continue(failed({text_block{" \n "}}), anthropic, on, false) == std::nullopt);
    CHECK(partial_to_continue(failed({text_block{"x"}, tool_call_block{"c", "t", {}}}), anthropic,
                              on, false) == std::nullopt);  // a tool call had started
    CHECK(partial_to_continue(failed({text_block{"x"}}, stop_reason::aborted), anthropic, on,
                              false) == std::nullopt);  // aborted: not retried
    CHECK(partial_to_continue(failed({text_block{"x"}}, stop_reason::stop), anthropic, on, false) ==
          std::nullopt);

    message rejected = failed({text_block{"Once upon a time"}});
    rejected.error_status = 400;
    CHECK(is_prefill_rejection(rejected));
    rejected.error_status = 529;
    CHECK_FALSE(is_prefill_rejection(rejected));
    CHECK(prefill_rejection_classification().retryable());
    CHECK(prefill_rejection_classification().rule == "prefill/rejected");

    // the continued reply: one text block, partial + continuation, usage summed
    message reply;
    reply.role = message_role::assistant;
    reply.content = {text_block{"Once upon a time"}, text_block{", there was"}};
    reply.usage = token_usage{100, 5, 10, 0, 115, token_cost{0.1, 0.2, 0, 0, 0.3}};
    message cut = failed({text_block{"Once upon a time "}});
    cut.usage = token_usage{90, 4, 0, 2, 96, token_cost{0.05, 0.1, 0, 0.01, 0.16}};
    join_continuation(reply, cut);
    REQUIRE(reply.content.size() == 1);
    CHECK(text_of(reply) == "Once upon a time, there was");
    CHECK(reply.usage.input == 190);
    CHECK(reply.usage.output == 9);
    CHECK(reply.usage.cache_read == 10);
    CHECK(reply.usage.cache_write == 2);
    CHECK(reply.usage.total_tokens == 211);
    CHECK(reply.usage.cost.total == Approx(0.46));
}
