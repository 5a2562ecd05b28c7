// The retry state machine and the backoff policy as plain code: tables of inputs → outputs.

#include <coagent/retry/backoff.hpp>
#include <coagent/retry/retry_machine.hpp>

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
classification none() { return {}; }

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
    CHECK(delay_to_duration(std::numeric_limits<std::int64_t>::max()) > std::chrono::hours(24 * 365 * 99));
    CHECK(delay_to_duration(-5) == std::chrono::nanoseconds::zero());
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
        {"second retryable", 1, error_msg("503"), retryable(), true, true, 2, 4000, false, false, 0},
        {"third retryable", 2, error_msg("503"), retryable(), true, true, 3, 8000, false, false, 0},
        {"fourth: exhausted", 3, error_msg("503"), retryable(), true, false, 0, 0, true, false, 3},
        {"disabled", 0, error_msg("503"), retryable(), false, false, 0, 0, false, false, 0},
        {"disabled mid-chain", 1, error_msg("503"), retryable(), false, false, 0, 0, true, false, 1},
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

TEST_CASE("retry machine: success after a retry ends with success at message_end; chain until agent_end", "[retry][spec-3]") {
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

TEST_CASE("retry machine: abort_retry while a retried attempt streams cancels the chain at agent_end", "[retry][spec-5]") {
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

TEST_CASE("retry machine: usage-limit decisions carry the hint; a switch forces delay 0", "[retry][spec-3]") {
    retry_machine m;
    auto e = error_msg("usage limit reached");
    classification c;
    c.kind = error_kind::usage_limit;
    c.retry_after_ms = 1234;
    auto d = m.on_agent_end(&e, c, {});
    CHECK(d.usage_limit);
    CHECK(d.retry_hint_ms == 1234);
    CHECK(d.start->delay_ms == 2000);
    retry_machine::usage_switch_succeeded(d);
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
