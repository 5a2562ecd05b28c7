// The retry state machine and the backoff policy as plain code: tables of inputs → outputs.

#include <coagent/retry/backoff.hpp>
#include <coagent/retry/retry_machine.hpp>

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

#include <limits>

using namespace coagent;

namespace {

message error_msg(std::string text) {
    message m;
    m.role = message_role::assistant;
    m.stop = stop_reason::error;
    m.error_message = std::move(text);
    return m;
}
message ok_msg() {
    message m;
    m.role = message_role::assistant;
    m.stop = stop_reason::stop;
    return m;
}
classification retryable() {
    classification c;
    c.kind = error_kind::retryable;
    c.rule = "status/503";
    return c;
}
classification none() {
    return {};
}

}  // namespace

TEST_CASE("backoff_delay = base * 2^(attempt-1), saturating", "[retry][spec-4]") {
    retry_settings s;
    CHECK(backoff_delay(s, 1) == 2000);
    CHECK(backoff_delay(s, 2) == 4000);
    CHECK(backoff_delay(s, 3) == 8000);
    CHECK(backoff_delay(s, 0) == 0);
    s.base_delay_ms = 0;
    CHECK(backoff_delay(s, 5) == 0);
    s.base_delay_ms = 1;
    CHECK(backoff_delay(s, 63) == (std::int64_t{1} << 62));
    CHECK(backoff_delay(s, 64) == std::numeric_limits<std::int64_t>::max());
    CHECK(backoff_delay(s, 1'000'000) == std::numeric_limits<std::int64_t>::max());
    s.base_delay_ms = std::numeric_limits<std::int64_t>::max();
    CHECK(backoff_delay(s, 2) == std::numeric_limits<std::int64_t>::max());
    CHECK(delay_to_duration(std::numeric_limits<std::int64_t>::max()) >
          std::chrono::hours(24 * 365 * 99));
    CHECK(delay_to_duration(-5) == std::chrono::nanoseconds::zero());
}

TEST_CASE("auto_retry_start carries what the failed attempt streamed (issue 21)",
          "[retry][issue-21]") {
    retry_settings s;
    CHECK(discarded_of(nullptr) == discarded_output{});
    message m = error_msg("503 x");
    CHECK(discarded_of(&m) == discarded_output{});  // streamed nothing: zeros
    m.content.emplace_back(text_block{"añb€"});     // 4 code points, 7 bytes
    m.content.emplace_back(tool_call_block{"c1", "read", {}});
    m.content.emplace_back(text_block{"\xF0\x9F\x98\x80"});  // one code point, 4 bytes
    m.content.emplace_back(tool_call_block{"c2", "write", {}});
    CHECK(discarded_of(&m) == discarded_output{5, 0, 2});
    retry_machine rm;
    auto d = rm.on_agent_end(&m, retryable(), s);
    REQUIRE(d.start);
    CHECK(d.start->discarded == discarded_output{5, 0, 2});
    CHECK(to_json(event{*d.start}).at("discarded") ==
          json::parse(R"({"textChars":5,"thinkingChars":0,"toolCalls":2})"));
}

TEST_CASE("retry machine: table of agent_end decisions", "[retry][spec-3][spec-4]") {
    retry_settings s;  // 3 retries, 2000 ms
    struct row {
        const char* name;
        int attempts_before;  // retryable errors already seen in this chain
        message msg;
        classification c;
        bool enabled;
        bool want_retry;
        int want_attempt;
        std::int64_t want_delay;
        bool want_end;
        bool want_end_success;
        int want_end_attempt;
    };
    const row rows[] = {
        {"first retryable", 0, error_msg("503"), retryable(), true, true, 1, 2000, false, false, 0},
        {"second retryable", 1, error_msg("503"), retryable(), true, true, 2, 4000, false, false,
         0},
        {"third retryable", 2, error_msg("503"), retryable(), true, true, 3, 8000, false, false, 0},
        {"fourth: exhausted", 3, error_msg("503"), retryable(), true, false, 0, 0, true, false, 3},
        {"disabled", 0, error_msg("503"), retryable(), false, false, 0, 0, false, false, 0},
        {"disabled mid-chain", 1, error_msg("503"), retryable(), false, false, 0, 0, true, false,
         1},
        {"non-retryable", 0, error_msg("401"), none(), true, false, 0, 0, false, false, 0},
        {"non-retryable mid-chain", 2, error_msg("400"), none(), true, false, 0, 0, true, false, 2},
        {"success outside a chain", 0, ok_msg(), none(), true, false, 0, 0, false, false, 0},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        retry_machine m;
        retry_settings rs = s;
        for (int i = 0; i < r.attempts_before; ++i) {
            auto msg = error_msg("503");
            auto d = m.on_agent_end(&msg, retryable(), rs);
            REQUIRE(d.will_retry);
            m.begin_wait();
            REQUIRE(m.on_wait_done(true).resume);
        }
        rs.enabled = r.enabled;
        auto d = m.on_agent_end(&r.msg, r.c, rs);
        CHECK(d.will_retry == r.want_retry);
        CHECK(d.start.has_value() == r.want_retry);
        if (d.start) {
            CHECK(d.start->attempt == r.want_attempt);
            CHECK(d.start->delay_ms == r.want_delay);
            CHECK(d.start->max_attempts == 3);
            CHECK(m.is_retrying());
        }
        CHECK(d.end.has_value() == r.want_end);
        if (d.end) {
            CHECK(d.end->success == r.want_end_success);
            CHECK(d.end->attempt == r.want_end_attempt);
            CHECK(d.end->final_error == r.msg.error_message);
            CHECK(m.attempt() == 0);
            CHECK_FALSE(m.is_retrying());
        }
    }
}

TEST_CASE(
    "retry machine: the max-exceeded end reports retryAttempt - 1, not retry.maxRetries (§4.3)",
    "[retry][spec-4]") {
    // retry.maxRetries lowered during a chain: the counter is incremented before the check
    // (§4.1), and the end reports the number of the last retry made, retryAttempt - 1
    struct row {
        int attempts_before;
        int lowered_to;
        int want_end_attempt;
    };
    for (const row r : {row{2, 1, 2}, row{1, 0, 1}, row{3, 1, 3}, row{2, 0, 2}}) {
        INFO("after " << r.attempts_before << " retries, maxRetries lowered to " << r.lowered_to);
        retry_machine m;
        retry_settings s;  // 3 retries
        for (int i = 0; i < r.attempts_before; ++i) {
            auto msg = error_msg("503");
            REQUIRE(m.on_agent_end(&msg, retryable(), s).will_retry);
            m.begin_wait();
            REQUIRE(m.on_wait_done(true).resume);
        }
        s.max_retries = r.lowered_to;
        auto msg = error_msg("503 again");
        auto d = m.on_agent_end(&msg, retryable(), s);
        CHECK_FALSE(d.will_retry);
        CHECK_FALSE(d.start);
        REQUIRE(d.end);
        CHECK_FALSE(d.end->success);
        CHECK(d.end->attempt == r.want_end_attempt);
        CHECK(d.end->attempt != s.max_retries);
        CHECK(d.end->final_error == "503 again");
        CHECK(m.attempt() == 0);
    }
}

TEST_CASE(
    "retry machine: success after a retry ends with success at message_end, chain until agent_end",
    "[retry][spec-3]") {
    retry_machine m;
    auto e = error_msg("503");
    REQUIRE(m.on_agent_end(&e, retryable(), {}).will_retry);
    m.begin_wait();
    REQUIRE(m.on_wait_done(true).resume);
    CHECK(m.retried_attempt_in_flight());
    auto end = m.on_assistant_message_end(ok_msg());
    REQUIRE(end);
    CHECK(end->success);
    CHECK(end->attempt == 1);
    CHECK(m.attempt() == 0);
    CHECK(m.is_retrying());  // until agent_end
    auto ok = ok_msg();
    auto d = m.on_agent_end(&ok, none(), {});
    CHECK_FALSE(d.end);
    CHECK_FALSE(m.is_retrying());
}

TEST_CASE("retry machine: aborted never counts as success", "[retry][spec-3]") {
    retry_machine m;
    auto e = error_msg("503");
    REQUIRE(m.on_agent_end(&e, retryable(), {}).will_retry);
    m.begin_wait();
    REQUIRE(m.on_wait_done(true).resume);
    message aborted = ok_msg();
    aborted.stop = stop_reason::aborted;
    CHECK_FALSE(m.on_assistant_message_end(aborted));
    CHECK(m.attempt() == 1);
}

TEST_CASE("retry machine: cancel during the wait, sticky across a fired timer", "[retry][spec-5]") {
    for (bool timer_fired_first : {false, true}) {
        retry_machine m;
        auto e = error_msg("503");
        REQUIRE(m.on_agent_end(&e, retryable(), {}).will_retry);
        m.begin_wait();
        CHECK(m.abort_retry());  // a wait is in progress: the shell cancels it
        auto w = m.on_wait_done(timer_fired_first);
        CHECK_FALSE(w.resume);
        REQUIRE(w.end);
        CHECK_FALSE(w.end->success);
        CHECK(w.end->attempt == 1);
        CHECK(w.end->final_error == "Retry cancelled");
        CHECK(m.attempt() == 0);
        CHECK_FALSE(m.is_retrying());
    }
}

TEST_CASE(
    "retry machine: abort_retry while a retried attempt streams cancels the chain at agent_end",
    "[retry][spec-5]") {
    retry_machine m;
    auto e = error_msg("503");
    REQUIRE(m.on_agent_end(&e, retryable(), {}).will_retry);
    m.begin_wait();
    REQUIRE(m.on_wait_done(true).resume);
    CHECK_FALSE(m.abort_retry());  // no wait to cancel; the shell aborts the stream
    CHECK(m.cancel_requested());
    auto again = error_msg("503");  // even a retryable failure ends the chain now
    auto d = m.on_agent_end(&again, retryable(), {});
    CHECK_FALSE(d.will_retry);
    REQUIRE(d.end);
    CHECK(d.end->final_error == "Retry cancelled");
}

TEST_CASE("retry machine: retry_now ends a wait as if it elapsed, only while a wait runs",
          "[retry][retry-now]") {
    auto e = error_msg("503");
    retry_machine m;
    CHECK_FALSE(m.retry_now());  // idle
    REQUIRE(m.on_agent_end(&e, retryable(), {}).will_retry);
    CHECK_FALSE(m.retry_now());  // decided, but the wait has not begun
    m.begin_wait();
    CHECK(m.retry_now());
    auto w = m.on_wait_done(false);  // the shell cancelled the timer
    CHECK(w.resume);
    CHECK_FALSE(w.end);
    CHECK(m.attempt() == 1);
    CHECK(m.retried_attempt_in_flight());
    CHECK_FALSE(m.retry_now());  // a retried attempt streams: nothing to retry now
    // the next failure continues the chain with the next attempt's delay
    auto d = m.on_agent_end(&e, retryable(), {});
    REQUIRE(d.will_retry);
    CHECK(d.start->attempt == 2);
    CHECK(d.start->delay_ms == 4000);
    m.begin_wait();
    // abort_retry wins over a retry_now that landed first, and retry_now after it is refused
    CHECK(m.retry_now());
    CHECK(m.abort_retry());
    w = m.on_wait_done(false);
    CHECK_FALSE(w.resume);
    REQUIRE(w.end);
    CHECK(w.end->final_error == "Retry cancelled");
    retry_machine m2;
    REQUIRE(m2.on_agent_end(&e, retryable(), {}).will_retry);
    m2.begin_wait();
    CHECK(m2.abort_retry());
    CHECK_FALSE(m2.retry_now());
    CHECK_FALSE(m2.on_wait_done(false).resume);
    // a plain cancel (no retry_now) is still a cancel
    retry_machine m3;
    REQUIRE(m3.on_agent_end(&e, retryable(), {}).will_retry);
    m3.begin_wait();
    CHECK_FALSE(m3.on_wait_done(false).resume);
}

TEST_CASE("retry machine: abort_retry with nothing pending has no effect", "[retry][spec-5]") {
    retry_machine m;
    CHECK_FALSE(m.abort_retry());
    CHECK_FALSE(m.cancel_requested());
    auto e = error_msg("503");
    CHECK(m.on_agent_end(&e, retryable(), {}).will_retry);
}

TEST_CASE("retry machine: abort() stops a new retry from starting", "[retry][spec-5][spec-10]") {
    retry_machine m;
    m.begin_prompt();
    CHECK_FALSE(m.abort());
    auto e = error_msg("503");
    auto d = m.on_agent_end(&e, retryable(), {});
    CHECK_FALSE(d.will_retry);
    CHECK_FALSE(d.end);
    m.begin_prompt();
    CHECK(m.on_agent_end(&e, retryable(), {}).will_retry);
}

TEST_CASE("retry machine: usage-limit decisions carry the hint, a switch forces delay 0",
          "[retry][spec-3]") {
    retry_machine m;
    auto e = error_msg("usage limit reached");
    classification c;
    c.kind = error_kind::usage_limit;
    c.retry_after_ms = 1234;
    auto d = m.on_agent_end(&e, c, {});
    CHECK(d.usage_limit);
    CHECK(d.retry_hint_ms == 1234);
    CHECK(d.start->delay_ms == 2000);
    m.usage_switch_succeeded(d);
    CHECK(d.start->delay_ms == 0);
}

TEST_CASE("retry machine: overflow goes to compaction, retryable never does", "[retry][spec-1]") {
    retry_machine m;
    auto e = error_msg("prompt is too long");
    classification c;
    c.kind = error_kind::context_overflow;
    auto d = m.on_agent_end(&e, c, {});
    CHECK(d.to_compaction);
    CHECK_FALSE(d.will_retry);
    auto r = error_msg("503");
    auto d2 = m.on_agent_end(&r, retryable(), {});
    CHECK_FALSE(d2.to_compaction);
}

// ---- additions beyond the spec (docs/architecture.md "Beyond the reference"), all off by default
// ---------

namespace {

classification with_hint(classification c, std::int64_t hint) {
    c.retry_after_ms = hint;
    return c;
}
classification usage_limit() {
    classification c;
    c.kind = error_kind::usage_limit;
    c.rule = "usage_limit/usage.?limit";
    return c;
}

}  // namespace

TEST_CASE("compute_retry_wait: table of backoff, hint, maxDelayMs and jitter",
          "[retry][beyond-spec]") {
    struct row {
        const char* name;
        bool honor;
        std::int64_t max_delay;
        retry_jitter jitter;
        int attempt;
        std::optional<std::int64_t> hint;
        double u;
        std::int64_t want_delay;
        bool want_over;
    };
    const row rows[] = {
        {"defaults: the spec's backoff, hint ignored", false, 0, retry_jitter::none, 1, 60000, 0.5,
         100, false},
        {"defaults, attempt 3", false, 0, retry_jitter::none, 3, std::nullopt, 0.5, 400, false},
        {"honor: hint is a floor", true, 0, retry_jitter::none, 1, 1000, 0.5, 1000, false},
        {"honor: backoff above the hint", true, 0, retry_jitter::none, 4, 300, 0.5, 800, false},
        {"honor without a hint", true, 0, retry_jitter::none, 2, std::nullopt, 0.5, 200, false},
        {"maxDelay caps the backoff", false, 250, retry_jitter::none, 3, std::nullopt, 0.5, 250,
         false},
        {"maxDelay: an honoured hint above it ends", true, 500, retry_jitter::none, 1, 1000, 0.5,
         1000, true},
        {"maxDelay: a hint within it", true, 1500, retry_jitter::none, 1, 1000, 0.5, 1000, false},
        {"maxDelay: an ignored hint does not end", false, 500, retry_jitter::none, 1, 1000, 0.5,
         100, false},
        {"full jitter, u=0", false, 0, retry_jitter::full, 3, std::nullopt, 0.0, 0, false},
        {"full jitter, u=0.5", false, 0, retry_jitter::full, 3, std::nullopt, 0.5, 200, false},
        {"full jitter, u→1", false, 0, retry_jitter::full, 3, std::nullopt, 0.999999, 400, false},
        {"equal jitter, u=0", false, 0, retry_jitter::equal, 3, std::nullopt, 0.0, 200, false},
        {"equal jitter, u=0.5", false, 0, retry_jitter::equal, 3, std::nullopt, 0.5, 300, false},
        {"jitter stays above an honoured hint", true, 0, retry_jitter::full, 3, 350, 0.0, 350,
         false},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        retry_settings s;
        s.base_delay_ms = 100;
        s.honor_retry_after = r.honor;
        s.max_delay_ms = r.max_delay;
        s.jitter = r.jitter;
        const auto w = compute_retry_wait(s, r.attempt, r.hint, r.u);
        CHECK(w.delay_ms == r.want_delay);
        CHECK(w.over_max == r.want_over);
    }
    retry_settings huge;
    huge.base_delay_ms = std::numeric_limits<std::int64_t>::max();
    huge.jitter = retry_jitter::full;
    CHECK(compute_retry_wait(huge, 5, std::nullopt, 0.999).delay_ms > 0);  // saturates, no overflow
}

TEST_CASE("retry machine: honorRetryAfter, maxDelayMs and jitter in agent_end decisions",
          "[retry][beyond-spec]") {
    retry_settings s;
    s.base_delay_ms = 100;
    auto e = error_msg("429 Rate limit reached for requests retry-after-ms=1000");
    {
        retry_machine m;
        auto d = m.on_agent_end(&e, with_hint(retryable(), 1000), s);
        REQUIRE(d.will_retry);
        CHECK(d.start->delay_ms == 100);  // default: the spec's backoff
    }
    s.honor_retry_after = true;
    {
        retry_machine m;
        auto d = m.on_agent_end(&e, with_hint(retryable(), 1000), s);
        REQUIRE(d.will_retry);
        CHECK(d.start->delay_ms == 1000);
    }
    s.max_delay_ms = 500;
    {
        retry_machine m;
        auto d = m.on_agent_end(&e, with_hint(retryable(), 1000), s);
        CHECK_FALSE(d.will_retry);
        REQUIRE(d.end);
        CHECK_FALSE(d.end->success);
        CHECK(d.end->attempt == 0);
        CHECK(d.end->final_error ==
              "429 Rate limit reached for requests retry-after-ms=1000 (server asked to wait 1s, "
              "above retry.maxDelayMs)");
        CHECK(m.attempt() == 0);
        CHECK_FALSE(m.is_retrying());
    }
    {
        // mid-chain: attempt = the retries made so far
        retry_machine m;
        auto first = error_msg("503");
        REQUIRE(m.on_agent_end(&first, retryable(), s).will_retry);
        m.begin_wait();
        REQUIRE(m.on_wait_done(true).resume);
        auto d = m.on_agent_end(&e, with_hint(retryable(), 2500), s);
        REQUIRE(d.end);
        CHECK(d.end->attempt == 1);
        CHECK_THAT(*d.end->final_error,
                   Catch::EndsWith("(server asked to wait 3s, above retry.maxDelayMs)"));
    }
    s = retry_settings{};
    s.jitter = retry_jitter::full;
    {
        retry_machine m;
        m.set_random([] { return 0.25; });
        auto first = error_msg("503");
        auto d = m.on_agent_end(&first, retryable(), s);
        REQUIRE(d.will_retry);
        CHECK(d.start->delay_ms == 500);  // 2000 × 0.25
    }
    {
        retry_machine m;  // the default source stays within [0, backoff]
        auto first = error_msg("503");
        auto d = m.on_agent_end(&first, retryable(), s);
        REQUIRE(d.will_retry);
        CHECK(d.start->delay_ms >= 0);
        CHECK(d.start->delay_ms <= 2000);
    }
}

TEST_CASE("retry machine: a usage limit above maxDelayMs ends unless the auth storage switches",
          "[retry][beyond-spec][spec-3]") {
    retry_settings s;
    s.base_delay_ms = 100;
    s.honor_retry_after = true;
    s.max_delay_ms = 500;
    auto e = error_msg("429 The usage limit has been reached retry-after-ms=1800000");
    {
        retry_machine m;
        auto d = m.on_agent_end(&e, with_hint(usage_limit(), 1'800'000), s);
        CHECK(d.usage_limit);  // the shell still tells the auth storage
        CHECK_FALSE(d.will_retry);
        REQUIRE(d.end);
        CHECK_FALSE(m.is_retrying());
    }
    {
        retry_machine m;
        auto d = m.on_agent_end(&e, with_hint(usage_limit(), 1'800'000), s);
        m.usage_switch_succeeded(d);  // another credential is free: go on, now
        CHECK(d.will_retry);
        CHECK_FALSE(d.end);
        REQUIRE(d.start);
        CHECK(d.start->attempt == 1);
        CHECK(d.start->delay_ms == 0);
        CHECK(m.is_retrying());
        CHECK(m.attempt() == 1);
        m.begin_wait();
        CHECK(m.on_wait_done(true).resume);
    }
    {
        // without the additions the usage-limit path keeps the spec's backoff
        retry_machine m;
        auto d = m.on_agent_end(&e, with_hint(usage_limit(), 1'800'000), retry_settings{});
        REQUIRE(d.will_retry);
        CHECK(d.start->delay_ms == 2000);
        CHECK(d.usage_limit);
        CHECK(d.retry_hint_ms == 1'800'000);
    }
}

TEST_CASE("retry machine: x-should-retry false stops the chain only with honorShouldRetry",
          "[retry][beyond-spec]") {
    auto e = error_msg("503 Service Unavailable");
    {
        retry_machine m;
        CHECK(m.on_agent_end(&e, retryable(), retry_settings{}, false)
                  .will_retry);  // recorded, not honoured
    }
    retry_settings s;
    s.honor_should_retry = true;
    {
        retry_machine m;
        auto d = m.on_agent_end(&e, retryable(), s, false);
        CHECK_FALSE(d.will_retry);
        CHECK_FALSE(d.end);  // no chain was active
    }
    {
        retry_machine m;
        REQUIRE(m.on_agent_end(&e, retryable(), s, std::nullopt).will_retry);
        m.begin_wait();
        REQUIRE(m.on_wait_done(true).resume);
        auto d = m.on_agent_end(&e, retryable(), s, false);
        CHECK_FALSE(d.will_retry);
        REQUIRE(d.end);
        CHECK(d.end->attempt == 1);
        CHECK(d.end->final_error == "503 Service Unavailable");
    }
    {
        retry_machine m;
        CHECK(m.on_agent_end(&e, retryable(), s, true).will_retry);
    }
    {
        // the 3-argument form reads the header's value from the message
        auto vetoed = error_msg("503 Service Unavailable");
        vetoed.should_retry = false;
        retry_machine m;
        CHECK_FALSE(m.on_agent_end(&vetoed, retryable(), s).will_retry);
        retry_machine m2;
        CHECK(m2.on_agent_end(&vetoed, retryable(), retry_settings{}).will_retry);
    }
}
