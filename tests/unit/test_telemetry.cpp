// The telemetry observer (issue 22): exact record sequences on the manual clock for each chain
// ending, and the session's usage accounting.

#include "support/session_harness.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

using namespace coagent;
using namespace coagent::test;
using strings = std::vector<std::string>;

namespace {

// every call as one line: "<virtual ms> <call> <fields>"
class recorder final : public telemetry {
  public:
    strings lines;
    void prompt_start(std::int64_t t) override { add(t, "prompt_start"); }
    void prompt_end(std::int64_t t, prompt_result::status o) override {
        add(t, fmt::format("prompt_end {}", to_string(o)));
    }
    void chat_start(std::int64_t t, const telemetry_model& m) override {
        add(t, fmt::format("chat_start {}/{}", m.provider, m.model));
    }
    void chat_end(std::int64_t t, const telemetry_chat& c) override {
        add(t, fmt::format("chat_end {} attempts={}",
                           c.ok ? std::string("ok") : "error:" + std::string(c.error_type),
                           c.attempts));
    }
    void attempt_start(std::int64_t t, const telemetry_model&, int n) override {
        add(t, fmt::format("attempt_start resend={}", n));
    }
    void attempt_end(std::int64_t t, const telemetry_attempt& a) override {
        add(t, fmt::format("attempt_end resend={} {} in={} out={}{}", a.resend_count, a.result,
                           a.usage.input, a.usage.output, a.wasted ? " wasted" : ""));
    }
    void retry(std::int64_t t, const telemetry_retry& r) override {
        add(t, fmt::format("retry attempt={} delay={} rule={} limit={}", r.attempt, r.delay_ms,
                           r.rule, to_string(r.limit)));
    }
    void backoff_start(std::int64_t t) override { add(t, "backoff_start"); }
    void backoff_end(std::int64_t t, std::int64_t ms) override {
        add(t, fmt::format("backoff_end {}ms", ms));
    }
    void credential_switch(std::int64_t t, std::string_view p, bool ok) override {
        add(t, fmt::format("credential_switch {} {}", p, ok));
    }
    void fallback(std::int64_t t, std::string_view from, std::string_view to) override {
        add(t, fmt::format("fallback {} -> {}", from, to));
    }
    void compaction(std::int64_t t, compaction_reason r, bool ok) override {
        add(t, fmt::format("compaction {} {}", to_string(r), ok));
    }

  private:
    void add(std::int64_t t_ns, std::string s) {
        lines.push_back(fmt::format("{} {}", t_ns / 1'000'000, s));
    }
};

struct observed {
    std::shared_ptr<recorder> rec = std::make_shared<recorder>();
    harness h;
    explicit observed(const std::string& script, settings s = settings{})
        : h(script, s, [this](session_options& o) { o.telemetry = rec; }) {}
};

const char* two_errors_then_ok =
    R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2,"usage":{"input":7,"output":2}},{"text":"Hello there","usage":{"input":10,"output":3}}])";

}  // namespace

TEST_CASE("telemetry: a chain that succeeds on its third attempt", "[telemetry]") {
    observed o(two_errors_then_ok);
    o.h.prompt("hi");
    o.h.advance(6000ms);
    REQUIRE(o.h.done());
    CHECK(o.rec->lines == strings{
                              "0 prompt_start",
                              "0 chat_start faux/faux",
                              "0 attempt_start resend=0",
                              "0 attempt_end resend=0 capacity in=7 out=2 wasted",
                              "0 retry attempt=1 delay=2000 rule=status/503 limit=capacity",
                              "0 backoff_start",
                              "2000 backoff_end 2000ms",
                              "2000 attempt_start resend=1",
                              "2000 attempt_end resend=1 capacity in=7 out=2 wasted",
                              "2000 retry attempt=2 delay=4000 rule=status/503 limit=capacity",
                              "2000 backoff_start",
                              "6000 backoff_end 4000ms",
                              "6000 attempt_start resend=2",
                              "6000 attempt_end resend=2 ok in=10 out=3",
                              "6000 chat_end ok attempts=3",
                              "6000 prompt_end succeeded",
                          });
    const session_usage& u = o.h.session->usage();
    CHECK(u.retries == 2);
    CHECK(u.retries_by_limit[static_cast<std::size_t>(limit_kind::capacity)] == 2);
    CHECK(u.wasted.input == 14);
    CHECK(u.wasted.output == 4);
    CHECK(u.backoff_ms == 6000);
}

TEST_CASE("telemetry: retries exhausted end the chat with the last error", "[telemetry]") {
    settings s;
    s.retry.max_retries = 1;
    observed o(R"([{"error":"503 Service Unavailable","status":503,"times":2}])", s);
    o.h.prompt("hi");
    o.h.advance(2000ms);
    REQUIRE(o.h.done());
    CHECK(o.rec->lines == strings{
                              "0 prompt_start",
                              "0 chat_start faux/faux",
                              "0 attempt_start resend=0",
                              "0 attempt_end resend=0 capacity in=0 out=0 wasted",
                              "0 retry attempt=1 delay=2000 rule=status/503 limit=capacity",
                              "0 backoff_start",
                              "2000 backoff_end 2000ms",
                              "2000 attempt_start resend=1",
                              "2000 attempt_end resend=1 capacity in=0 out=0 wasted",
                              "2000 chat_end error:capacity attempts=2",
                              "2000 prompt_end failed",
                          });
    CHECK(o.h.session->usage().retries == 1);
}

TEST_CASE("telemetry: a non-retryable error on the retried attempt fails the chat", "[telemetry]") {
    observed o(
        R"([{"error":"429 Too Many Requests: rate limit","status":429},{"error":"400 Bad Request: invalid","status":400}])");
    o.h.prompt("hi");
    o.h.advance(2000ms);
    REQUIRE(o.h.done());
    CHECK(o.rec->lines == strings{
                              "0 prompt_start",
                              "0 chat_start faux/faux",
                              "0 attempt_start resend=0",
                              "0 attempt_end resend=0 rate in=0 out=0 wasted",
                              "0 retry attempt=1 delay=2000 rule=status/429 limit=rate",
                              "0 backoff_start",
                              "2000 backoff_end 2000ms",
                              "2000 attempt_start resend=1",
                              "2000 attempt_end resend=1 other in=0 out=0 wasted",
                              "2000 chat_end error:other attempts=2",
                              "2000 prompt_end failed",
                          });
}

TEST_CASE("telemetry: abort_retry during the backoff cancels the chat", "[telemetry]") {
    observed o(two_errors_then_ok);
    o.h.prompt("hi");
    o.h.advance(500ms);
    o.h.session->abort_retry();
    o.h.run_ready();
    REQUIRE(o.h.done());
    CHECK(o.rec->lines == strings{
                              "0 prompt_start",
                              "0 chat_start faux/faux",
                              "0 attempt_start resend=0",
                              "0 attempt_end resend=0 capacity in=7 out=2 wasted",
                              "0 retry attempt=1 delay=2000 rule=status/503 limit=capacity",
                              "0 backoff_start",
                              "500 backoff_end 500ms",
                              "500 chat_end error:capacity attempts=1",
                              "500 prompt_end failed",
                          });
    CHECK(o.h.session->usage().backoff_ms == 500);
}

TEST_CASE("telemetry: a tool turn is two chats in one prompt", "[telemetry]") {
    observed o(R"([{"toolCall":{"name":"nope","arguments":{}}},{"text":"done"}])");
    o.h.prompt("hi");
    REQUIRE(o.h.done());
    std::optional<prompt_result> second;
    CHECK(o.rec->lines == strings{
                              "0 prompt_start",
                              "0 chat_start faux/faux",
                              "0 attempt_start resend=0",
                              "0 attempt_end resend=0 ok in=0 out=0",
                              "0 chat_end ok attempts=1",
                              "0 chat_start faux/faux",
                              "0 attempt_start resend=0",
                              "0 attempt_end resend=0 ok in=6 out=2",
                              "0 chat_end ok attempts=1",
                              "0 prompt_end succeeded",
                          });
    // no failed attempt: the session allocated no usage accounting
    CHECK(o.h.session->usage().retries == 0);
    CHECK(o.h.session->usage().wasted.input == 0);
}

TEST_CASE("telemetry: none attached, the usage accounting still counts", "[telemetry]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    h.advance(6000ms);
    REQUIRE(h.done());
    CHECK(h.session->usage().retries == 2);
    CHECK(h.session->usage().wasted.input == 14);
    CHECK(h.session->usage().backoff_ms == 6000);
}

TEST_CASE("telemetry: a manual compaction with nothing to compact is reported failed",
          "[telemetry]") {
    observed o(R"([{"text":"ok"}])");
    std::optional<compact_result> r;
    asio::co_spawn(o.h.io, o.h.session->compact(), [&r](std::exception_ptr e, compact_result c) {
        if (!e) r = std::move(c);
    });
    o.h.run_ready();
    REQUIRE(r.has_value());
    CHECK_FALSE(r->ok);
    CHECK(o.rec->lines == strings{"0 compaction manual false"});
}
