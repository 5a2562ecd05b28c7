// The retry policy inside agent_session, rule by rule (docs/retry-policy.md §1-§10 and the
// chain endings of docs/retry-policy.md), on a manual clock with exact event sequences and
// requests.

#include "support/expected_events.hpp"
#include "support/session_harness.hpp"

#include <coagent/runtime/json_text.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

using namespace coagent;
using namespace coagent::test;
using strings = std::vector<std::string>;

namespace {

const char* two_errors_then_ok =
    R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2},{"text":"Hello there"}])";
const char* four_errors =
    R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":3},{"error":"502 Bad Gateway","status":502}])";

bool any_failed_assistant(const faux_request& r) {
    for (const auto& m : r.messages)
        if (m.role == "assistant" && (m.stop_reason == "error" || m.stop_reason == "aborted"))
            return true;
    return false;
}

strings roles(const faux_request& r) {
    strings out;
    for (const auto& m : r.messages) out.push_back(m.role);
    return out;
}
strings roles_of(const std::vector<message_ptr>& ms) {
    strings out;
    for (const auto& m : ms)
        out.push_back(m->role == message_role::user        ? "user"
                      : m->role == message_role::assistant ? "assistant"
                                                           : "toolResult");
    return out;
}

}  // namespace

TEST_CASE("retry.maxDelayMs caps our backoff: exact delays and request times (issue 15)",
          "[session][spec-11][issue-15]") {
    settings cfg;
    cfg.retry.max_delay_ms = 3000;  // base 2000: 2000, then 4000 and 8000 capped at 3000
    harness h(
        R"([{"error":"503 Service Unavailable","status":503,"times":3},{"error":"503 Service Unavailable","status":503}])",
        cfg);
    h.prompt("hi");
    for (std::int64_t wait : {2000, 3000, 3000}) {
        const auto before = h.requests().size();
        h.advance(std::chrono::milliseconds(wait - 1));
        CHECK(h.requests().size() == before);
        h.advance(1ms);
        CHECK(h.requests().size() == before + 1);
    }
    REQUIRE(h.done());
    std::vector<std::int64_t> delays;
    for (const auto& e : h.of("auto_retry_start")) delays.push_back(e.at("delayMs").as_int64());
    CHECK(delays == std::vector<std::int64_t>{2000, 3000, 3000});
    // a capped backoff never ends the chain: it runs to its end, retries exhausted
    CHECK(
        h.of("auto_retry_end").back() ==
        obj(R"({"type":"auto_retry_end","success":false,"attempt":3,"finalError":"503 Service Unavailable"})"));
}

TEST_CASE(
    "retry.maxDelayMs: an honoured server wait above it ends the chain at once with the exact "
    "finalError (issue 15)",
    "[session][spec-11][issue-15]") {
    settings cfg;
    cfg.retry.max_delay_ms = 3000;
    cfg.retry.honor_retry_after = true;
    SECTION("the first error asks for 5 s: no retry, attempt 0") {
        harness h(
            R"([{"error":"429 Too Many Requests retry-after-ms=5000","status":429},{"text":"never"}])",
            cfg);
        h.prompt("hi");
        REQUIRE(h.done());
        CHECK(h.requests().size() == 1);
        CHECK(h.of("auto_retry_start").empty());
        CHECK(
            h.of("auto_retry_end") ==
            std::vector<json::object>{obj(
                R"j({"type":"auto_retry_end","success":false,"attempt":0,"finalError":"429 Too Many Requests retry-after-ms=5000 (server asked to wait 5s, above retry.maxDelayMs)"})j")});
        CHECK(h.result->outcome == prompt_result::status::failed);
    }
    SECTION("after one retry of 2 s, a wait of 3001 ms ends the chain with attempt 1") {
        harness h(
            R"([{"error":"503 Service Unavailable","status":503},{"error":"429 Too Many Requests retry-after-ms=3001","status":429},{"text":"never"}])",
            cfg);
        h.prompt("hi");
        h.advance(2000ms);
        REQUIRE(h.done());
        CHECK(h.requests().size() == 2);
        CHECK(
            h.of("auto_retry_end") ==
            std::vector<json::object>{obj(
                R"j({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"429 Too Many Requests retry-after-ms=3001 (server asked to wait 4s, above retry.maxDelayMs)"})j")});
    }
    SECTION("a server wait at the cap or below is honoured as a floor") {
        harness h(
            R"([{"error":"429 Too Many Requests retry-after-ms=3000","status":429},{"text":"ok"}])",
            cfg);
        h.prompt("hi");
        CHECK(h.of("auto_retry_start").at(0).at("delayMs") == 3000);
        h.advance(2999ms);
        CHECK(h.requests().size() == 1);
        h.advance(1ms);
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::succeeded);
    }
}

TEST_CASE("two errors then success: exact events, delays, requests and prompt completion",
          "[session][spec-3][spec-4][spec-7]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    CHECK(h.requests().size() == 1);
    CHECK(h.session->is_retrying());
    CHECK(h.session->retry_attempt() == 1);
    h.advance(1999ms);
    CHECK(h.requests().size() == 1);
    h.advance(1ms);  // 2000 ms: first retry
    CHECK(h.requests().size() == 2);
    h.advance(3900ms);  // virtual 5.9 s
    CHECK(h.requests().size() == 2);
    CHECK_FALSE(h.done());
    h.advance(100ms);  // virtual 6 s
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(text_of(*h.result->last_assistant) == "Hello there");

    CHECK(brief(h.events) == coagent::test::two_retries_then_success_events);

    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 2);
    CHECK(
        starts[0] ==
        obj(R"({"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000,"errorMessage":"503 Service Unavailable: upstream overloaded","limit":"capacity","discarded":{"textChars":0,"thinkingChars":0,"toolCalls":0}})"));
    CHECK(
        starts[1] ==
        obj(R"({"type":"auto_retry_start","attempt":2,"maxAttempts":3,"delayMs":4000,"errorMessage":"503 Service Unavailable: upstream overloaded","limit":"capacity","discarded":{"textChars":0,"thinkingChars":0,"toolCalls":0}})"));
    CHECK(h.of("auto_retry_end")[0] ==
          obj(R"({"type":"auto_retry_end","success":true,"attempt":2})"));

    auto reqs = h.requests();
    REQUIRE(reqs.size() == 3);
    for (const auto& r : reqs) {
        CHECK_FALSE(any_failed_assistant(r));
        CHECK(roles(r) == strings{"user"});
    }
    int assistants = 0;
    for (const auto& e : h.session->history().entries())
        if (e.msg && e.msg->role == message_role::assistant) ++assistants;
    CHECK(assistants == 3);                    // errors stay in the history (policy §11)
    CHECK(h.session->messages().size() == 2);  // user + reply: the errors left the runtime context
    CHECK_FALSE(h.session->is_retrying());
    CHECK(h.session->retry_attempt() == 0);
    CHECK(h.of("agent_settled").size() == 1);
}

TEST_CASE("retries exhausted: starts 1..3, end with the last error, error stays in context",
          "[session][spec-4][spec-9]") {
    harness h(four_errors);
    h.prompt("hi");
    h.advance(2000ms);
    h.advance(4000ms);
    CHECK_FALSE(h.done());
    h.advance(8000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.result->error == "502 Bad Gateway");
    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 3);
    CHECK(starts[0].at("delayMs").as_int64() == 2000);
    CHECK(starts[1].at("delayMs").as_int64() == 4000);
    CHECK(starts[2].at("delayMs").as_int64() == 8000);
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":3,"finalError":"502 Bad Gateway"})")});
    CHECK(h.requests().size() == 4);
    auto b = brief(h.events);
    CHECK(strings(b.end() - 5, b.end()) == strings{"message_end:assistant:error", "turn_end",
                                                   "agent_end{final}", "auto_retry_end{fail,3}",
                                                   "agent_settled"});
    REQUIRE(h.session->messages().size() == 2);
    CHECK(h.session->messages().back()->error_message == "502 Bad Gateway");  // stays in context
    CHECK(h.session->retry_attempt() == 0);
    CHECK_FALSE(h.session->is_retrying());
}

TEST_CASE("maxRetries 0: only auto_retry_end{success:false,attempt:0}", "[session][spec-4]") {
    settings s;
    s.retry.max_retries = 0;
    harness h(two_errors_then_ok, s);
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.of("auto_retry_start").empty());
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":0,"finalError":"503 Service Unavailable: upstream overloaded"})")});
    auto b = brief(h.events);
    CHECK(strings(b.end() - 3, b.end()) ==
          strings{"agent_end{final}", "auto_retry_end{fail,0}", "agent_settled"});
    CHECK(h.requests().size() == 1);
}

TEST_CASE("abort_retry during the backoff cancels the chain (§5)", "[session][spec-5][spec-10]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    h.advance(1000ms);
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.result->error == "Retry cancelled");
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})")});
    auto b = brief(h.events);
    CHECK(strings(b.end() - 4, b.end()) == strings{"agent_end{retry}", "auto_retry_start{1}",
                                                   "auto_retry_end{fail,1}", "agent_settled"});
    h.advance(60s);
    CHECK(h.requests().size() == 1);  // no further request
    CHECK_FALSE(h.session->is_retrying());
    CHECK(h.session->retry_attempt() == 0);
    // the removed error is not put back: the context ends with the user message
    REQUIRE(h.session->messages().size() == 1);
    CHECK(h.session->messages()[0]->role == message_role::user);
}

TEST_CASE("abort() during the backoff cancels the retry first, then aborts",
          "[session][spec-5][spec-10]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    h.advance(1000ms);
    h.session->abort();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})")});
    h.advance(60s);
    CHECK(h.requests().size() == 1);
}

TEST_CASE("retry_now at virtual 1 s of a 4 s wait: the next request goes out at 1 s",
          "[session][retry-now]") {
    harness h(R"([{"error":"503 a","status":503,"times":2},{"text":"ok"}])");
    CHECK_FALSE(h.session->retry_now());  // idle
    h.prompt("hi");
    h.advance(2000ms);  // retry 1 fails: the 4 s wait of attempt 2 begins
    REQUIRE(h.requests().size() == 2);
    REQUIRE(h.of("auto_retry_start").size() == 2);
    h.advance(1000ms);
    CHECK(h.requests().size() == 2);
    CHECK(h.session->retry_now());
    h.run_ready();
    CHECK(h.requests().size() == 3);  // at virtual 3 s, not 6 s
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    // the chain's events as if the timer had fired: no second start for attempt 2
    CHECK(brief(h.events) == coagent::test::two_retries_then_success_events);
    CHECK_FALSE(h.session->retry_now());  // settled: nothing waits
}

TEST_CASE("retry_now then a failure: the next backoff has the next attempt's delay",
          "[session][retry-now]") {
    harness h(four_errors);
    h.prompt("hi");
    h.advance(500ms);
    REQUIRE(h.session->retry_now());  // attempt 1's 2 s wait ends at 0.5 s
    h.run_ready();
    REQUIRE(h.requests().size() == 2);
    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 2);
    CHECK(starts[1].at("attempt") == 2);
    CHECK(starts[1].at("delayMs") == 4000);
    h.advance(3999ms);
    CHECK(h.requests().size() == 2);
    h.advance(1ms);
    CHECK(h.requests().size() == 3);
    // while a retried attempt streams there is nothing to retry now
    h.session->abort_retry();
    h.run_ready();
}

TEST_CASE("abort_retry lands after the timer fired but before the continue ran",
          "[session][spec-5]") {
    // zero delay: the continue is a posted task; the sticky flag must still cancel it
    settings s;
    s.retry.base_delay_ms = 0;
    harness h(two_errors_then_ok, s);
    h.prompt_until("hi", "auto_retry_start");  // then cancel, before the posted continue
    REQUIRE(h.of("auto_retry_start").size() == 1);
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.of("auto_retry_end")[0].at("finalError").as_string() == "Retry cancelled");
    CHECK(h.requests().size() == 1);
}

TEST_CASE("abort_retry while a retried attempt streams aborts that attempt", "[session][spec-5]") {
    harness h(R"([{"error":"503 overloaded","status":503},{"text":"late reply","delayMs":5000}])");
    h.prompt("hi");
    h.advance(2000ms);  // retried attempt starts, waits 5 s before answering
    CHECK(h.requests().size() == 2);
    CHECK(h.session->is_streaming());
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})")});
    auto ends = h.of("message_end");
    CHECK(ends.back().at("message").at("stopReason").as_string() == "aborted");
}

TEST_CASE("abort while a retried attempt streams: aborted never counts as success",
          "[session][spec-3]") {
    harness h(R"([{"error":"503 overloaded","status":503},{"text":"late reply","delayMs":5000}])");
    h.prompt("hi");
    h.advance(2000ms);
    h.session->abort();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    auto ends = h.of("auto_retry_end");
    REQUIRE(ends.size() == 1);
    CHECK(ends[0].at("success").as_bool() == false);
    CHECK(ends[0].at("finalError").as_string() == "Retry cancelled");
}

namespace {
/// Call 1 fails with a 503; call 2 starts streaming and then ends only when aborted — and it
/// ends *inside* the abort request: its cancellation handler completes the stream at once, so
/// the whole end of the run (message_end, agent_end, the retry machine's decision) happens
/// within abort_signal::request(). That makes the order of abort()'s two steps visible: the
/// retry must already be cancelled when the stream's abort lands (§5.3).
struct inline_abort_provider final : provider {
    int calls = 0;
    model_info model() const override { return {"inline", "inline-model", "test", 128000, 4096}; }
    asio::awaitable<void> stream(const provider_request&, message& out, stream_observer& observer,
                                 abort_signal& abort) override {
        if (++calls == 1) {
            out.stop = stop_reason::error;
            out.error_message = "503 Service Unavailable";
            out.error_status = 503;
            co_return;
        }
        observer.on_message_start(out);
        co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
            [&abort](auto handler) {
                // invoked from inside request(): resumes this coroutine at once
                abort.slot().assign(
                    [h = std::move(handler)](asio::cancellation_type) mutable { std::move(h)(); });
            },
            asio::use_awaitable);
        out.stop = stop_reason::aborted;
        out.error_message = "Request was aborted";
    }
};
}  // namespace

TEST_CASE("abort() cancels the retry before it aborts the stream (§5.3): the order is visible",
          "[session][spec-5]") {
    auto p = std::make_shared<inline_abort_provider>();
    harness h("[]", settings{}, [&](session_options& o) { o.model_provider = p; });
    h.prompt("hi");
    h.advance(2000ms);
    REQUIRE(p->calls == 2);
    REQUIRE(h.session->is_streaming());
    h.session->abort();  // the retried attempt ends inside this call
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    // had the stream been aborted first, the machine would have seen a plain aborted reply
    // and ended the chain with that reply's text ("Request was aborted")
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})")});
    CHECK(brief(h.events).back() == "agent_settled");
}

TEST_CASE("abort_retry while a first attempt streams has no effect (§5.5)", "[session][spec-5]") {
    // no chain yet: nothing to cancel, the attempt runs on, and its error starts a chain as usual
    harness h(R"([{"error":"503 Service Unavailable","status":503,"delayMs":1000},{"text":"ok"}])");
    h.prompt("hi");
    h.advance(500ms);
    REQUIRE(h.session->is_streaming());
    CHECK_FALSE(h.session->is_retrying());
    h.session->abort_retry();
    h.advance(500ms);  // the first attempt fails now
    REQUIRE(h.of("auto_retry_start").size() == 1);
    CHECK(h.of("auto_retry_start")[0].at("attempt") == 1);
    h.advance(2000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(R"({"type":"auto_retry_end","success":true,"attempt":1})")});
    CHECK(h.requests().size() == 2);
}

TEST_CASE(
    "the continue runs as a fresh task, never inside the handler that emitted the start "
    "(§3.11)",
    "[session][spec-3]") {
    settings s;
    s.retry.base_delay_ms = 0;  // no wait at all: only the posted continue separates them
    harness h(two_errors_then_ok, s);
    std::size_t requests_at_start = 0;
    auto sub = h.session->subscribe([&](const event& e) {
        if (std::holds_alternative<auto_retry_start_event>(e))
            requests_at_start = h.faux->requests().size();
    });
    h.prompt_until("hi", "auto_retry_start");
    REQUIRE(h.of("auto_retry_start").size() == 1);
    CHECK(requests_at_start == 1);
    CHECK(h.requests().size() == 1);  // the handler that emitted the start did not continue
    h.io.restart();
    h.io.run_one();  // the posted continue
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.requests().size() == 3);
    CHECK(h.result->outcome == prompt_result::status::succeeded);
}

TEST_CASE("a new chain starts inside the same prompt after a reset (§10.7)",
          "[session][spec-10][tools]") {
    // retry 1 succeeds with a tool call (chain over), the next turn fails again: a new chain,
    // attempt 1 with the base delay, inside the same prompt
    harness h(
        R"([{"error":"503 a","status":503},{"toolCall":{"name":"echo","arguments":{}}},{"error":"503 b","status":503},{"text":"done"}])");
    h.session->register_tool({"echo", "echoes", {}},
                             [](json::object) -> boost::asio::awaitable<tool_output> {
                                 co_return tool_output{"echoed", false};
                             });
    h.prompt("hi");
    h.advance(2000ms);  // retry 1 of chain 1: the tool call, then the failing turn
    REQUIRE(h.of("auto_retry_start").size() == 2);
    CHECK_FALSE(h.done());
    h.advance(1999ms);
    CHECK(h.requests().size() == 3);
    h.advance(1ms);  // 2000 ms, not 4000: attempt 1 of a new chain
    REQUIRE(h.done());
    CHECK(h.requests().size() == 4);
    auto starts = h.of("auto_retry_start");
    CHECK(starts[0].at("attempt") == 1);
    CHECK(starts[1].at("attempt") == 1);
    CHECK(starts[1].at("delayMs") == 2000);
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(R"({"type":"auto_retry_end","success":true,"attempt":1})"),
                                  obj(R"({"type":"auto_retry_end","success":true,"attempt":1})")});
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(brief(h.events).back() == "agent_settled");
}

TEST_CASE(
    "every event reaches the extensions first, then the listeners in subscription order "
    "(§9.4)",
    "[session][spec-9][extensions]") {
    harness h(two_errors_then_ok);  // the harness's own listener subscribed first
    std::vector<std::string> order;
    auto second = h.session->subscribe([&](const event& e) {
        if (std::holds_alternative<auto_retry_start_event>(e))
            order.push_back("listener-2:" + std::to_string(h.events.size()));
    });
    auto third = h.session->subscribe([&](const event& e) {
        if (std::holds_alternative<auto_retry_start_event>(e)) order.push_back("listener-3");
    });
    h.session->add_extension("ext", [&](const event& e) {
        // added last, called first: the harness's listener has not seen this event yet
        if (std::holds_alternative<auto_retry_start_event>(e))
            order.push_back("ext:" + std::to_string(h.events.size()));
    });
    h.prompt("hi");
    REQUIRE(order.size() == 3);
    const auto before = h.events.size() - 1;  // the start is the harness's last event
    CHECK(order == strings{"ext:" + std::to_string(before),
                           "listener-2:" + std::to_string(before + 1), "listener-3"});
}

TEST_CASE("extensions receive a failed auto_retry_end with the same fields (§9.8)",
          "[session][spec-9][extensions]") {
    settings s;
    s.retry.max_retries = 1;
    harness h(four_errors, s);
    std::vector<json::object> seen;
    h.session->add_extension("ext", [&](const event& e) {
        if (std::holds_alternative<auto_retry_end_event>(e)) seen.push_back(to_json(e));
    });
    h.prompt("hi");
    h.advance(2000ms);
    REQUIRE(h.done());
    const auto want = obj(
        R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"503 Service Unavailable: upstream overloaded"})");
    CHECK(seen == std::vector<json::object>{want});
    CHECK(h.of("auto_retry_end") == std::vector<json::object>{want});
}

TEST_CASE("retry.enabled false: no retry starts (§3.2)", "[session][spec-3][spec-10]") {
    settings s;
    s.retry.enabled = false;
    harness h(two_errors_then_ok, s);
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.of("auto_retry_start").empty());
    CHECK(h.of("auto_retry_end").empty());
    CHECK(h.requests().size() == 1);
    CHECK_FALSE(h.session->is_retrying());
}

TEST_CASE("set_auto_retry_enabled writes retry.enabled for the session (§8)", "[session][spec-8]") {
    harness h(two_errors_then_ok);
    CHECK(h.session->auto_retry_enabled());
    h.session->set_auto_retry_enabled(false);
    CHECK_FALSE(h.session->auto_retry_enabled());
    CHECK_FALSE(h.session->config().retry.enabled);
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.of("auto_retry_start").empty());
}

TEST_CASE("retry turned off during the wait: the wait goes on, the next failure ends the chain",
          "[session][endings]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    h.session->set_auto_retry_enabled(false);
    h.advance(2000ms);
    REQUIRE(h.done());
    CHECK(h.requests().size() == 2);
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"503 Service Unavailable: upstream overloaded"})")});
}

TEST_CASE("a non-retryable error does not retry (§2, §10)", "[session][spec-2][spec-10]") {
    harness h(R"([{"error":"401 Incorrect API key provided","status":401},{"text":"never"}])");
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.of("auto_retry_start").empty());
    CHECK(h.of("auto_retry_end").empty());
    CHECK(h.of("agent_end")[0].at("willRetry").as_bool() == false);
    CHECK(h.requests().size() == 1);
}

TEST_CASE("a retried attempt failing non-retryably ends the chain with that error",
          "[session][endings]") {
    harness h(
        R"([{"error":"503 overloaded","status":503},{"error":"400 Invalid parameter","status":400}])");
    h.prompt("hi");
    h.advance(2000ms);
    REQUIRE(h.done());
    CHECK(
        h.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"400 Invalid parameter"})")});
    CHECK_FALSE(h.session->is_retrying());
}

namespace {
struct recording_compaction final : compaction_hook {
    int calls = 0;
    bool succeed = false;
    boost::asio::awaitable<compaction_outcome> compact(compaction_request, abort_signal&) override {
        ++calls;
        compaction_outcome o;
        o.ok = succeed;
        if (succeed)
            o.summary = "S";
        else
            o.error_message = "cannot compact";
        co_return o;
    }
};
settings keep_nothing() {
    settings s;
    s.compaction.keep_recent_tokens = 0;
    return s;
}
}  // namespace

TEST_CASE("context overflow goes to compaction, never to retry (§1)",
          "[session][spec-1][spec-10]") {
    auto hook = std::make_shared<recording_compaction>();
    harness h(
        R"([{"error":"400 prompt is too long: 213462 tokens > 200000 maximum","status":400},{"text":"x"}])",
        keep_nothing(), [&](session_options& o) { o.compaction = hook; });
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(hook->calls == 1);
    CHECK(h.of("auto_retry_start").empty());
    CHECK(h.of("auto_retry_end").empty());
    auto b = brief(h.events);
    CHECK(strings(b.end() - 5, b.end()) == strings{"turn_end", "agent_end{final}",
                                                   "compaction_start", "compaction_end",
                                                   "agent_settled"});
    CHECK(h.of("compaction_start")[0] == obj(R"({"type":"compaction_start","reason":"overflow"})"));
    CHECK(
        h.of("compaction_end")[0] ==
        obj(R"({"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":false,"errorMessage":"cannot compact"})"));
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.requests().size() == 1);
}

TEST_CASE("overflow with a compaction that succeeds continues the turn once", "[session][spec-1]") {
    auto hook = std::make_shared<recording_compaction>();
    hook->succeed = true;
    harness h(R"([{"error":"400 prompt is too long","status":400},{"text":"fine now"}])",
              keep_nothing(), [&](session_options& o) { o.compaction = hook; });
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    auto b = brief(h.events);
    CHECK(strings(b.begin() + 8, b.end()) ==
          strings{"compaction_start", "compaction_end", "agent_start", "turn_start",
                  "message_start:assistant", "message_end:assistant:stop", "turn_end",
                  "agent_end{final}", "agent_settled"});
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[1].messages[0].text == "The conversation so far, summarized:\nS");
}

TEST_CASE("overflow without compaction enabled ends with the error", "[session][spec-1]") {
    auto hook = std::make_shared<recording_compaction>();
    settings s;
    s.compaction.enabled = false;
    harness h(R"([{"error":"400 prompt is too long","status":400}])", s,
              [&](session_options& o) { o.compaction = hook; });
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(hook->calls == 0);
    CHECK(h.of("compaction_start").empty());
}

TEST_CASE("a retried attempt that overflows ends the chain, then compaction",
          "[session][endings][spec-1]") {
    auto hook = std::make_shared<recording_compaction>();
    harness h(
        R"([{"error":"503 overloaded","status":503},{"error":"400 prompt is too long","status":400}])",
        keep_nothing(), [&](session_options& o) { o.compaction = hook; });
    h.prompt("hi");
    h.advance(2000ms);
    REQUIRE(h.done());
    auto b = brief(h.events);
    CHECK(strings(b.end() - 5, b.end()) == strings{"agent_end{final}", "auto_retry_end{fail,1}",
                                                   "compaction_start", "compaction_end",
                                                   "agent_settled"});
    CHECK(hook->calls == 1);
}

TEST_CASE("the compaction check is skipped on a turn whose retry started (§1.3): a session",
          "[session][spec-1]") {
    auto hook = std::make_shared<recording_compaction>();
    // a retryable error, then a reply whose context is above the threshold (window 128000 -
    // reserve 16384): the retry turns never compact, the successful one does
    harness h(
        R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2},{"text":"big","usage":{"input":120000,"output":10}}])",
        keep_nothing(), [&](session_options& o) { o.compaction = hook; });
    h.prompt("hi");
    CHECK(hook->calls == 0);
    h.advance(2000ms);
    CHECK(hook->calls == 0);
    h.advance(4000ms);
    REQUIRE(h.done());
    CHECK(hook->calls == 1);
    auto b = brief(h.events);
    CHECK(std::count(b.begin(), b.end(), "compaction_start") == 1);
    CHECK(strings(b.end() - 4, b.end()) ==
          strings{"agent_end{final}", "compaction_start", "compaction_end", "agent_settled"});
}

TEST_CASE("a new chain starts after a reset (§10)", "[session][spec-10][spec-3]") {
    harness h(
        R"([{"error":"503 a","status":503},{"text":"one"},{"error":"503 b","status":503},{"text":"two"}])");
    h.prompt("first");
    h.advance(2000ms);
    REQUIRE(h.done());
    h.result.reset();
    h.events.clear();
    h.prompt("second");
    h.advance(2000ms);  // attempt 1 again: base delay, not 4000
    REQUIRE(h.done());
    CHECK(h.of("auto_retry_start")[0].at("attempt").as_int64() == 1);
    CHECK(h.of("auto_retry_start")[0].at("delayMs").as_int64() == 2000);
    CHECK(h.of("auto_retry_end")[0] ==
          obj(R"({"type":"auto_retry_end","success":true,"attempt":1})"));
}

TEST_CASE("usage limit with a successful credential switch waits 0 ms (§3.7)",
          "[session][spec-3][usage-limit]") {
    auto auth =
        std::make_shared<in_memory_auth_storage>([] { return std::int64_t{1'700'000'000'000}; });
    auth->add_credential("faux", "key-a");
    auth->add_credential("faux", "key-b");
    std::string session_id;
    harness h(
        R"([{"error":"429 You have reached your usage limit for this period","status":429},{"text":"ok"}])",
        settings{}, [&](session_options& o) { o.auth = auth; });
    CHECK(auth->api_key("faux", h.session->session_id()) == "key-a");
    h.prompt("hi");
    REQUIRE(h.done());  // no virtual time needed
    CHECK(h.of("auto_retry_start")[0].at("delayMs").as_int64() == 0);
    CHECK(auth->api_key("faux", h.session->session_id()) == "key-b");
    CHECK(auth->blocked_until("faux", 0) == 1'700'000'000'000 + 60'000);
}

TEST_CASE("usage limit without another credential keeps the exponential backoff",
          "[session][usage-limit]") {
    auto auth =
        std::make_shared<in_memory_auth_storage>([] { return std::int64_t{1'700'000'000'000}; });
    auth->add_credential("faux", "only");
    harness h(R"([{"error":"usage limit reached, try again in 30s","status":429},{"text":"ok"}])",
              settings{}, [&](session_options& o) { o.auth = auth; });
    (void)auth->api_key("faux", h.session->session_id());
    h.prompt("hi");
    CHECK(h.of("auto_retry_start")[0].at("delayMs").as_int64() == 2000);
    CHECK(auth->blocked_until("faux", 0) == 1'700'000'000'000 + 30'000);  // the hint
    h.advance(2000ms);
    REQUIRE(h.done());
}

TEST_CASE("isRetrying reports the lifecycle, prompt waits for the chain (§7, §8)",
          "[session][spec-7][spec-8]") {
    harness h(two_errors_then_ok);
    std::vector<std::pair<std::string, bool>> seen;
    auto s2 = h.session->subscribe([&](const event& e) {
        seen.emplace_back(std::string(event_type(e)), h.session->is_retrying());
    });
    h.prompt("hi");
    CHECK(h.session->is_retrying());
    CHECK_FALSE(h.session->is_streaming());  // backoff: not streaming, but retrying
    CHECK(h.session->is_busy());
    h.advance(6000ms);
    REQUIRE(h.done());
    // the chain stays active until the agent_end of the successful run
    for (const auto& [type, retrying] : seen) {
        if (type == "auto_retry_end") CHECK(retrying);
        if (type == "agent_settled") CHECK_FALSE(retrying);
    }
}

TEST_CASE("the trailing error leaves the runtime context after auto_retry_start is emitted (§3.9)",
          "[session][spec-3]") {
    harness h(two_errors_then_ok);
    std::size_t context_at_start = 0;
    bool last_is_error = false;
    auto s2 = h.session->subscribe([&](const event& e) {
        if (std::holds_alternative<auto_retry_start_event>(e)) {
            context_at_start = h.session->messages().size();
            last_is_error = h.session->messages().back()->stop == stop_reason::error;
        }
    });
    h.prompt("hi");
    CHECK(context_at_start == 2);
    CHECK(last_is_error);
    CHECK(h.session->messages().size() == 1);
}

TEST_CASE("events reach extensions in load order, a throwing extension is reported, not fatal",
          "[session][spec-9][extensions]") {
    std::vector<std::string> order;
    harness h(two_errors_then_ok, settings{}, [](session_options&) {});
    h.session->add_extension("ext-a", [&](const event& e) {
        if (std::holds_alternative<auto_retry_start_event>(e)) order.push_back("a");
    });
    h.session->add_extension("ext-bad", [](const event& e) {
        if (std::holds_alternative<auto_retry_start_event>(e)) throw std::runtime_error("boom");
    });
    h.session->add_extension("ext-c", [&](const event& e) {
        if (std::holds_alternative<auto_retry_end_event>(e)) order.push_back("c-end");
        if (std::holds_alternative<auto_retry_start_event>(e)) order.push_back("c");
    });
    h.prompt("hi");
    h.advance(6000ms);
    REQUIRE(h.done());
    CHECK(order == strings{"a", "c", "a", "c", "c-end"});
    auto errs = h.of("extension_error");
    REQUIRE(errs.size() == 2);
    CHECK(
        errs[0] ==
        obj(R"({"type":"extension_error","extensionPath":"ext-bad","event":"auto_retry_start","error":"boom"})"));
    CHECK(h.result->outcome == prompt_result::status::succeeded);
}

TEST_CASE(
    "tool calls: toolUse -> execute -> toolResult -> next turn, a retry continues from the "
    "toolResult",
    "[session][tools][issue-21]") {
    harness h(
        R"([{"toolCall":{"name":"echo","arguments":{"x":1}}},{"error":"503 overloaded","status":503},{"text":"done"}])");
    std::vector<std::string> tool_args;
    h.session->register_tool({"echo", "echoes", {}},
                             [&](json::object args) -> boost::asio::awaitable<tool_output> {
                                 tool_args.push_back(json::serialize(args));
                                 co_return tool_output{"echoed", false};
                             });
    h.prompt("use the tool");
    h.advance(2000ms);
    REQUIRE(h.done());
    CHECK(tool_args == strings{R"({"x":1})"});
    auto b = brief(h.events);
    CHECK(strings(b.begin(), b.begin() + 13) ==
          strings{"agent_start", "turn_start", "message_start:user", "message_end:user",
                  "message_start:assistant", "message_end:assistant:toolUse",
                  "tool_execution_start", "tool_execution_end", "message_start:toolResult",
                  "message_end:toolResult", "turn_end", "turn_start", "message_start:assistant"});
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 3);
    CHECK(roles(reqs[1]) == strings{"user", "assistant", "toolResult"});
    CHECK(roles(reqs[2]) == strings{"user", "assistant", "toolResult"});  // the error was dropped
    CHECK(h.of("turn_end")[0].at("toolResults").as_array().size() == 1);
    CHECK(h.result->outcome == prompt_result::status::succeeded);
}

TEST_CASE(
    "abort while a tool runs: the call gets the interrupted result, the tool is not run "
    "again (issue 21)",
    "[session][tools][abort][issue-21]") {
    harness h(R"([{"toolCall":{"name":"slow","arguments":{"n":1}}},{"text":"never sent"}])");
    int started = 0, finished = 0;
    h.session->register_tool({"slow", "waits 10 s", {}},
                             [&](json::object) -> boost::asio::awaitable<tool_output> {
                                 ++started;
                                 manual_timer t(co_await boost::asio::this_coro::executor);
                                 t.expires_after(10s);
                                 co_await t.async_wait(boost::asio::use_awaitable);
                                 ++finished;
                                 co_return tool_output{"slept", false};
                             });
    h.prompt("go");
    h.advance(1000ms);
    CHECK(started == 1);
    CHECK_FALSE(h.done());
    h.session->abort();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    CHECK(brief(h.events) ==
          strings{"agent_start", "turn_start", "message_start:user", "message_end:user",
                  "message_start:assistant", "message_end:assistant:toolUse",
                  "tool_execution_start", "tool_execution_end", "message_start:toolResult",
                  "message_end:toolResult", "turn_end", "agent_end{final}", "agent_settled"});
    const std::string interrupted =
        "Tool slow was interrupted before it finished; it was not run again.";
    json::object end = h.of("tool_execution_end").at(0);
    CHECK(end == obj(R"({"type":"tool_execution_end","toolCallId":"faux_call_1","toolName":"slow",)"
                     R"("result":{"content":[{"type":"text","text":")" +
                     interrupted + R"("}]},"isError":true})"));
    const message& tr = *h.session->messages().back();
    CHECK(tr.role == message_role::tool_result);
    CHECK(tr.is_error);
    CHECK(text_of(tr) == interrupted);
    h.advance(10000ms);  // the tool's wait was cancelled: it never finishes, nothing runs again
    CHECK(finished == 0);
    CHECK(started == 1);
    CHECK(h.requests().size() == 1);
}

TEST_CASE(
    "abort while a tool that takes no cancellation runs: it finishes and keeps its result "
    "(issue 21)",
    "[session][tools][abort][issue-21]") {
    harness h(R"([{"toolCall":{"name":"stubborn","arguments":{}}},{"text":"never sent"}])");
    h.session->register_tool({"stubborn", "", {}},
                             [](json::object) -> boost::asio::awaitable<tool_output> {
                                 co_await boost::asio::this_coro::reset_cancellation_state(
                                     [](boost::asio::cancellation_type) {
                                         return boost::asio::cancellation_type::none;
                                     });
                                 manual_timer t(co_await boost::asio::this_coro::executor);
                                 t.expires_after(10s);
                                 co_await t.async_wait(boost::asio::use_awaitable);
                                 co_return tool_output{"it happened", false};
                             });
    h.prompt("go");
    h.session->abort();
    h.run_ready();
    CHECK_FALSE(h.done());  // the tool still runs
    h.advance(10000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    CHECK(text_of(*h.session->messages().back()) == "it happened");  // what really happened
    CHECK(h.requests().size() == 1);
}

TEST_CASE("plan_tool_call_repair: the last turn's tool calls without a result (issue 21)",
          "[session][tools][issue-21]") {
    const auto user = std::make_shared<message>(make_user_message("hi"));
    const auto calls = [](std::vector<std::string> names, stop_reason stop) {
        auto m = std::make_shared<message>();
        m->role = message_role::assistant;
        m->stop = stop;
        for (std::size_t i = 0; i < names.size(); ++i)
            m->content.emplace_back(tool_call_block{"c" + std::to_string(i + 1), names[i], {}});
        return message_ptr(m);
    };
    const auto result = [](std::string id) {
        return message_ptr(std::make_shared<message>(make_tool_result(id, "t", "out", false)));
    };
    tool_runner tools;
    tools.add({"read", "", {}}, {}, tool_options{true});
    tools.add({"write", "", {}}, {});
    const auto plan = [&](std::vector<message_ptr> ctx) {
        strings out;
        for (const auto& r : plan_tool_call_repair(ctx, &tools))
            out.push_back(r.call->id + (r.run_again ? ":run" : ":interrupted"));
        return out;
    };
    const auto both = calls({"write", "read"}, stop_reason::tool_use);
    CHECK(plan({user, both}) == strings{"c1:interrupted", "c2:run"});
    CHECK(plan({user, both, result("c1")}) == strings{"c2:run"});
    CHECK(plan({user, both, result("c2")}) == strings{"c1:interrupted"});
    CHECK(plan({user, both, result("c1"), result("c2")}).empty());
    CHECK(plan({user, both, result("c1"), result("c2"), user}).empty());
    CHECK(plan({user}).empty());
    CHECK(plan({}).empty());
    CHECK(plan({user, calls({"write"}, stop_reason::error)}).empty());  // never sent
    CHECK(plan({user, calls({"write"}, stop_reason::aborted)}).empty());
    // without a tool runner (nothing registered): nothing runs again
    const auto ctx = std::vector<message_ptr>{user, both};
    CHECK(plan_tool_call_repair(ctx, nullptr).size() == 2);
    CHECK_FALSE(plan_tool_call_repair(ctx, nullptr)[1].run_again);
    CHECK(interrupted_tool_text("write") ==
          "Tool write was interrupted before it finished; it was not run again.");
}

TEST_CASE("a prompt while a request streams: refused without a behaviour", "[session][busy]") {
    harness h(R"([{"text":"one two three four","stallMs":3000}])");
    h.prompt("hi");
    h.run_ready();
    REQUIRE(h.session->is_streaming());
    std::optional<prompt_result> refused;
    h.prompt_into("again", streaming_behavior::none, refused);
    REQUIRE(refused);
    CHECK(refused->outcome == prompt_result::status::refused);
    CHECK(refused->error == agent_session::busy_message);
    CHECK_FALSE(h.session->can_join_backoff());
    h.advance(3000ms);
    REQUIRE(h.done());
    CHECK(h.requests().size() == 1);  // the refused message went nowhere
}

TEST_CASE("during a backoff: followUp and steer queued (steer joins without ending the wait)",
          "[session][busy][issue-26]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    std::optional<prompt_result> follow, steer;
    h.prompt_into("steered", streaming_behavior::steer, steer);
    h.prompt_into("later", streaming_behavior::follow_up, follow);
    CHECK(h.session->pending_message_count() == 2);
    CHECK_FALSE(steer);
    h.advance(1999ms);
    CHECK(h.requests().size() == 1);  // the steer does not end the wait
    h.advance(1ms);                   // retry 1: the steer joins the context before this request
    h.advance(4000ms);                // retry 2 succeeds, then the follow-up runs
    REQUIRE(h.done());
    REQUIRE(follow);
    REQUIRE(steer);
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 4);
    CHECK(roles(reqs[1]) == strings{"user", "user"});
    CHECK(reqs[1].messages[1].text == "steered");
    CHECK(roles(reqs[3]) == strings{"user", "user", "assistant", "user"});
    CHECK(reqs[3].messages[3].text == "later");
    CHECK(h.of("agent_settled").size() == 1);
}

TEST_CASE("a plain prompt during a backoff joins the conversation and goes out at once",
          "[session][busy][issue-26]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    h.advance(2000ms);  // retry 1 fails: a 4 s wait begins at virtual 2 s
    REQUIRE(h.of("auto_retry_start").size() == 2);
    h.advance(1000ms);  // virtual 1 s into the 4 s wait
    REQUIRE(h.session->can_join_backoff());
    const std::size_t before = h.events.size();
    std::optional<prompt_result> joined;
    h.prompt_into("and one more thing", streaming_behavior::none, joined);
    h.run_ready();  // no time passes
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 3);  // the next attempt went out at once
    CHECK(roles(reqs[2]) == strings{"user", "user"});
    CHECK(reqs[2].messages[0].text == "hi");
    CHECK(reqs[2].messages[1].text == "and one more thing");
    REQUIRE(h.done());
    REQUIRE(joined);
    // the joined message's events right after it was accepted, then the attempt's; the chain
    // goes on as a chain: no new start, its success ends it at attempt 2
    const std::vector<json::object> after(h.events.begin() + static_cast<std::ptrdiff_t>(before),
                                          h.events.end());
    CHECK(brief(after) == strings{"message_start:user", "message_end:user", "agent_start",
                                  "turn_start", "message_start:assistant",
                                  "message_end:assistant:stop", "auto_retry_end{ok,2}", "turn_end",
                                  "agent_end{final}", "agent_settled"});
    CHECK(h.of("auto_retry_start").size() == 2);
    CHECK(h.of("agent_settled").size() == 1);
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(joined->outcome == prompt_result::status::succeeded);
    CHECK(joined->last_assistant == h.result->last_assistant);
    // persisted: the session's context and history hold both user messages
    CHECK(roles_of(h.session->messages()) == strings{"user", "user", "assistant"});
}

TEST_CASE(
    "a prompt joined to a backoff whose next attempt fails: the chain goes on or ends as usual",
    "[session][busy][issue-26]") {
    settings s;
    s.retry.max_retries = 2;
    harness h(R"([{"error":"503 Service Unavailable","status":503,"times":3}])", s);
    h.prompt("hi");
    h.advance(500ms);
    std::optional<prompt_result> joined;
    h.prompt_into("more", streaming_behavior::none, joined);
    h.run_ready();
    REQUIRE(h.requests().size() == 2);  // attempt 1 of the chain at once
    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 2);  // it failed: the next backoff, retry 2, 4 s
    CHECK(starts[1].at("attempt") == 2);
    CHECK(starts[1].at("delayMs") == 4000);
    h.advance(4000ms);
    REQUIRE(h.done());
    REQUIRE(joined);
    CHECK(
        h.of("auto_retry_end")[0] ==
        obj(R"({"type":"auto_retry_end","success":false,"attempt":2,"finalError":"503 Service Unavailable"})"));
    CHECK(joined->outcome == prompt_result::status::failed);
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.of("agent_settled").size() == 1);
}

TEST_CASE(
    "a prompt after abort_retry() in the backoff is not joined, cancelling a joined prompt "
    "aborts the chain",
    "[session][busy][issue-26]") {
    {
        harness h(two_errors_then_ok);
        h.prompt("hi");
        h.session->abort_retry();
        CHECK_FALSE(h.session->can_join_backoff());
        CHECK_FALSE(h.session->join_backoff("too late"));
        h.run_ready();
        REQUIRE(h.done());
        CHECK(h.result->error == "Retry cancelled");
        CHECK(h.requests().size() == 1);
    }
    {
        harness h(
            R"([{"error":"503 Service Unavailable","status":503},{"text":"x","stallMs":5000}])");
        h.prompt("hi");
        std::optional<prompt_result> joined;
        asio::cancellation_signal cancel;
        asio::co_spawn(
            h.io, h.session->prompt("more"),
            asio::bind_cancellation_slot(cancel.slot(),
                                         [&](std::exception_ptr, prompt_result r) { joined = r; }));
        h.run_ready();
        REQUIRE(h.requests().size() == 2);
        REQUIRE(h.session->is_streaming());
        cancel.emit(asio::cancellation_type::terminal);
        h.run_ready();
        REQUIRE(h.done());
        REQUIRE(joined);
        CHECK(h.result->outcome == prompt_result::status::aborted);
        CHECK(joined->outcome == prompt_result::status::aborted);
    }
}

TEST_CASE("every message is persisted before listeners see its message_end", "[session][history]") {
    harness h(two_errors_then_ok);
    bool all_persisted = true;
    auto s2 = h.session->subscribe([&](const event& e) {
        if (const auto* me = std::get_if<message_end_event>(&e)) {
            const auto& entries = h.session->history().entries();
            all_persisted = all_persisted && !entries.empty() && entries.back().msg == me->message;
        }
    });
    h.prompt("hi");
    h.advance(6000ms);
    REQUIRE(h.done());
    CHECK(all_persisted);
}

TEST_CASE("stall beyond the stream idle timeout is a retryable timeout error", "[session][faux]") {
    settings s;
    s.provider.stream_idle_timeout_ms = 1000;
    harness h(R"([{"text":"one two three four","stallMs":5000},{"text":"ok"}])", s);
    h.prompt("hi");
    h.advance(1000ms);
    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 1);
    CHECK(std::string(starts[0].at("errorMessage").as_string()).find("timed out") !=
          std::string::npos);
    h.advance(2000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
}

TEST_CASE(
    "auto_retry_start.discarded counts what the failed attempt streamed, in code points "
    "(issue 21)",
    "[session][issue-21]") {
    settings s;
    s.provider.stream_idle_timeout_ms = 1000;
    // cut halfway: "héllo wörld" streamed (11 code points, 13 bytes), then the stall times out;
    // then an error that streamed nothing
    harness h(
        R"([{"text":"héllo wörld ünd mehr","stallMs":5000},{"error":"503 x","status":503},{"text":"ok"}])",
        s);
    h.prompt("hi");
    h.advance(1000ms);
    h.advance(2000ms);
    h.advance(4000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 2);
    CHECK(starts[0].at("discarded") == obj(R"({"textChars":11,"thinkingChars":0,"toolCalls":0})"));
    CHECK(starts[1].at("discarded") == obj(R"({"textChars":0,"thinkingChars":0,"toolCalls":0})"));
    // the errored message keeps its partial content (in the history, not in the context)
    const json::object first_failed = h.of("message_end").at(1).at("message").as_object();
    CHECK(first_failed.at("stopReason") == "error");
    CHECK(first_failed.at("content") == json::parse(R"([{"type":"text","text":"héllo wörld"}])"));
    // the partial text is not sent again
    for (const auto& r : h.requests()) CHECK(roles(r) == strings{"user"});
}

TEST_CASE("abort while streaming (no retry) ends the prompt aborted, no retry",
          "[session][abort]") {
    harness h(R"([{"text":"slow","delayMs":1000}])");
    h.prompt("hi");
    CHECK(h.session->is_streaming());
    h.session->abort();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    CHECK(h.of("auto_retry_start").empty());
    CHECK(h.of("message_end").back().at("message").at("stopReason").as_string() == "aborted");
}

TEST_CASE("huge baseDelayMs saturates instead of overflowing", "[session][spec-4]") {
    settings s;
    s.retry.base_delay_ms = std::numeric_limits<std::int64_t>::max() / 2;
    s.retry.max_retries = 5;
    harness h(four_errors, s);
    h.prompt("hi");
    auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 1);
    CHECK(starts[0].at("delayMs").as_int64() == std::numeric_limits<std::int64_t>::max() / 2);
    h.session->abort_retry();
    h.run_ready();
    CHECK(h.done());
}

TEST_CASE("async_prompt: any completion token, a bound cancellation slot aborts the retry chain",
          "[session][embedding]") {
    harness h(two_errors_then_ok);
    asio::cancellation_signal cancel;
    std::optional<prompt_result> got;
    h.session->async_prompt("hi", asio::bind_cancellation_slot(
                                      cancel.slot(), [&](std::exception_ptr e, prompt_result r) {
                                          if (e) std::rethrow_exception(e);
                                          got = std::move(r);
                                      }));
    h.run_ready();
    REQUIRE(h.session->is_retrying());
    cancel.emit(asio::cancellation_type::terminal);
    h.run_ready();
    REQUIRE(got);
    CHECK(got->outcome == prompt_result::status::aborted);
    CHECK(got->error == "Retry cancelled");
    CHECK(h.of("auto_retry_end")[0].at("finalError") == "Retry cancelled");
    h.advance(std::chrono::milliseconds(10000));
    CHECK(h.requests().size() == 1);

    // a plain callback without a slot, on the next prompt, completes after the chain
    harness h2(two_errors_then_ok);
    std::optional<prompt_result> got2;
    h2.session->async_prompt("hi",
                             [&](std::exception_ptr, prompt_result r) { got2 = std::move(r); });
    h2.run_ready();
    CHECK_FALSE(got2);
    h2.advance(std::chrono::milliseconds(6000));
    REQUIRE(got2);
    CHECK(got2->outcome == prompt_result::status::succeeded);
}

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

TEST_CASE("prompt() raced against a deadline with awaitable operators ends the turn cleanly",
          "[session][embedding]") {
    using namespace asio::experimental::awaitable_operators;
    harness h(two_errors_then_ok);
    std::optional<std::string> winner;
    auto race = [](agent_session& s, std::optional<std::string>& out) -> asio::awaitable<void> {
        manual_timer deadline(co_await asio::this_coro::executor);
        deadline.expires_after(std::chrono::milliseconds(1000));
        auto r = co_await (s.prompt("hi") || deadline.async_wait(asio::use_awaitable));
        out = r.index() == 0 ? "prompt" : "deadline";
    };
    asio::co_spawn(h.io, race(*h.session, winner), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
    h.run_ready();
    h.advance(std::chrono::milliseconds(1000));
    REQUIRE(winner);
    CHECK(*winner == "deadline");
    CHECK_FALSE(h.session->is_busy());
    CHECK_FALSE(h.session->is_retrying());
    CHECK(h.of("auto_retry_end")[0].at("finalError") == "Retry cancelled");
    CHECK(h.of("agent_settled").size() == 1);
    // the session is usable again
    h.prompt("again");
    h.advance(std::chrono::milliseconds(2000));
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
}

TEST_CASE("async_prompt: the handler runs on its associated executor, a late cancel has no effect",
          "[session][embedding]") {
    harness h(R"([{"text":"one"},{"text":"two"}])");
    asio::io_context other;
    asio::cancellation_signal cancel;
    std::optional<prompt_result> got;
    h.session->async_prompt(
        "hi", asio::bind_cancellation_slot(
                  cancel.slot(), asio::bind_executor(other.get_executor(),
                                                     [&](std::exception_ptr, prompt_result r) {
                                                         got = std::move(r);
                                                     })));
    h.run_ready();
    CHECK_FALSE(got);  // not run on the session's io_context
    other.poll();
    REQUIRE(got);
    CHECK(got->outcome == prompt_result::status::succeeded);
    cancel.emit(asio::cancellation_type::terminal);  // after completion
    h.prompt("next");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(text_of(*h.result->last_assistant) == "two");
}

TEST_CASE("cancelling a queued follow-up drops only its message", "[session][embedding][busy]") {
    harness h(two_errors_then_ok);
    h.prompt("hi");
    asio::cancellation_signal cancel;
    std::optional<prompt_result> queued;
    h.session->async_prompt(
        "later", streaming_behavior::follow_up,
        asio::bind_cancellation_slot(
            cancel.slot(), [&](std::exception_ptr, prompt_result r) { queued = std::move(r); }));
    h.run_ready();
    CHECK(h.session->pending_message_count() == 1);
    cancel.emit(asio::cancellation_type::terminal);
    h.run_ready();
    REQUIRE(queued);
    CHECK(queued->outcome == prompt_result::status::aborted);
    CHECK(h.session->pending_message_count() == 0);
    CHECK(h.session->is_retrying());  // the running prompt goes on
    h.advance(std::chrono::milliseconds(6000));
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(h.requests().size() == 3);  // no follow-up request
}

TEST_CASE(
    "event and message text: what Boost.JSON writes for the same values, in the reference's key "
    "order",
    "[events]") {
    auto a = std::make_shared<message>();
    a->role = message_role::assistant;
    a->content.emplace_back(text_block{"q\"uote \\ \n\t\x01 é"});
    json::object args;
    args["x"] = 1.5;
    args["s"] = "v";
    a->content.emplace_back(tool_call_block{"id1", "tool", args});
    a->api = "faux";
    a->provider = "faux";
    a->model = "faux";
    a->usage = token_usage{3, 4, 0, 0, 7, token_cost{0.5, 1e-7, 0, 2, 1e300}};
    a->stop = stop_reason::error;
    a->error_message = "503 x";
    a->error_status = 503;
    a->error_type = "overloaded";
    a->should_retry = false;
    a->timestamp = 1700000000000;
    auto tr = std::make_shared<message>(make_tool_result("id1", "tool", "out", true));
    auto u = std::make_shared<message>(make_user_message("hi"));
    const std::vector<event> events = {
        agent_start_event{},
        message_update_event{a, "del\"ta"},
        message_end_event{u},
        tool_execution_start_event{"id1", "tool", args},
        tool_execution_end_event{"id1", "tool", json::value("r"), true},
        turn_end_event{a, {tr}},
        agent_end_event{{u, a, tr}, true},
        auto_retry_start_event{1, 3, 2000, "503 x", limit_kind::capacity, {12, 0, 1}},
        auto_retry_end_event{false, 3, std::string("Retry cancelled")},
        auto_retry_end_event{true, 1, std::nullopt},
        compaction_end_event{"overflow", json::value(json::object{{"summary", "s"}}), false, true,
                             std::nullopt},
        retry_fallback_applied_event{"a/m1", "b/m2", "default"},
        retry_fallback_succeeded_event{"b/m2", "default"},
        agent_settled_event{},
    };
    for (const auto& e : events) {
        std::string text;
        append_json(text, e);
        INFO(text);
        CHECK(json::serialize(json::parse(text)) == text);
    }
    std::string text;
    append_json(text, *a);
    CHECK(
        text ==
        R"({"role":"assistant","content":[{"type":"text","text":"q\"uote \\ \n\t\u0001 é"},)"
        R"({"type":"toolCall","id":"id1","name":"tool","arguments":{"x":1.5E0,"s":"v"}}],)"
        R"("api":"faux","provider":"faux","model":"faux","usage":{"input":3,"output":4,"cacheRead":0,)"
        R"("cacheWrite":0,"totalTokens":7,"cost":{"input":5E-1,"output":1E-7,"cacheRead":0,"cacheWrite":2,)"
        R"("total":1E300}},"stopReason":"error","errorMessage":"503 x","errorStatus":503,)"
        R"("errorType":"overloaded","shouldRetry":false,"timestamp":1700000000000})");
    text.clear();
    append_json(text, *tr);
    CHECK(
        text ==
        R"({"role":"toolResult","content":[{"type":"text","text":"out"}],"toolCallId":"id1","toolName":"tool","isError":true,"timestamp":)" +
            std::to_string(tr->timestamp) + "}");
}

TEST_CASE(
    "json_text::append_string writes what boost::json::serialize writes, at every offset "
    "and length, for every byte that needs escaping",
    "[json]") {
    // the 16- and 8-bytes-at-a-time scans must find a byte to escape wherever it sits in a block,
    // and next to UTF-8 bytes (0x80 and above, which pass through)
    const std::string specials = std::string("\"\\\b\f\n\r\t\x01\x1f", 9) + std::string(1, '\0');
    const std::string filler =
        "abcdefghijklmnopq\xc3\xa9\xe2\x86\xbb xyz ~\x7f\x20\x21"
        "0123456789ABCDEFGHIJ";
    for (std::size_t len = 0; len <= 40; ++len) {  // the 16-byte step, the 8-byte one, the tail
        for (std::size_t at = 0; at <= len; ++at) {
            for (char special : specials) {
                std::string s = filler.substr(0, len);
                if (at < len) s[at] = special;
                std::string text;
                coagent::json_text::append_string(text, s);
                INFO("len " << len << " at " << at << " byte " << int(special));
                REQUIRE(text == json::serialize(json::string(s)));
            }
        }
    }
    std::string two;  // two bytes to escape in one word, and a long clean run
    coagent::json_text::append_string(two, std::string(40, 'a') + "\"\n" + std::string(13, 'b'));
    CHECK(two == "\"" + std::string(40, 'a') + "\\\"\\n" + std::string(13, 'b') + "\"");
}

// ---- the script model both fakes play (<coagent/providers/script_model.hpp>) ----------------

TEST_CASE("script model: each step answers 'times' requests, then the script runs out",
          "[faux][script_model]") {
    struct test_step : scripted::step_base {};
    std::vector<test_step> steps(3);
    steps[0].text = "a";
    steps[0].times = 2;
    steps[1].text = "b";
    steps[2].text = "c";
    steps[2].times = 3;
    scripted::cursor c;
    std::vector<std::string> played;
    while (const test_step* s = c.next(steps)) played.push_back(s->text);
    CHECK(played == std::vector<std::string>{"a", "a", "b", "c", "c", "c"});
    CHECK(c.next(steps) == nullptr);  // and stays out
    scripted::cursor empty;
    CHECK(empty.next(std::vector<test_step>{}) == nullptr);

    using words = std::vector<std::string_view>;
    CHECK(scripted::split_words("") == words{});
    CHECK(scripted::split_words("one") == words{"one"});
    CHECK(scripted::split_words("a bc  d") == words{"a", " bc", " ", " d"});
    CHECK(scripted::split_words(" lead") == words{" lead"});
    CHECK_THROWS_WITH(scripted::step_error("f.json", 1, "bad"), "f.json: step 2: bad");
}

TEST_CASE(
    "retry.budget: sessions sharing a local store stop retrying once it is at half, "
    "exact events (issue 19)",
    "[session][budget][issue-19]") {
    settings cfg;
    cfg.budget.enabled = true;
    cfg.budget.max_tokens = 4;  // threshold 2: after two failures no retry is allowed
    auto store = std::make_shared<local_limit_store>();
    const auto shared = [&](session_options& o) { o.limits = store; };
    const std::string down = R"([{"error":"503 Service Unavailable","status":503,"times":9}])";

    harness a(down, cfg, shared);
    a.prompt("hi");  // failure 1: 3 tokens, a retry is allowed
    CHECK(a.requests().size() == 1);
    CHECK(a.of("auto_retry_start").size() == 1);
    CHECK(a.session->limits() == store);

    harness b(down, cfg, shared);
    b.prompt("hi");  // failure 2: 2 tokens, not above 2: refused, an end without a start
    REQUIRE(b.done());
    CHECK(b.requests().size() == 1);
    CHECK(b.result->outcome == prompt_result::status::failed);
    auto bb = brief(b.events);
    CHECK(strings(bb.end() - 4, bb.end()) ==
          strings{"turn_end", "agent_end{final}", "auto_retry_end{fail,0}", "agent_settled"});
    CHECK(
        b.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"x({"type":"auto_retry_end","success":false,"attempt":0,"finalError":"503 Service Unavailable (retry budget for faux exhausted)"})x")});

    // a's retry goes out after its 2 s backoff, fails (1 token), and is not retried again
    a.advance(2000ms);
    REQUIRE(a.done());
    CHECK(a.requests().size() == 2);
    CHECK(
        a.of("auto_retry_end") ==
        std::vector<json::object>{obj(
            R"x({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"503 Service Unavailable (retry budget for faux exhausted)"})x")});
    REQUIRE(store->budget_levels().size() == 1);
    CHECK(store->budget_levels()[0].tokens_milli == 1000);

    // successes refill it: ten replies at 0.1 → 2 tokens, still not above 2; one more → 2.1
    harness c(R"([{"text":"ok","times":11}])", cfg, shared);
    for (int i = 0; i < 11; ++i) {
        c.result.reset();
        c.prompt("hi");
        REQUIRE(c.done());
    }
    CHECK(store->budget_levels()[0].tokens_milli == 2100);
    harness d(R"([{"error":"503 Service Unavailable","status":503},{"text":"ok"}])", cfg, shared);
    d.prompt("hi");  // failure: 1.1 tokens → refused
    REQUIRE(d.done());
    CHECK(d.requests().size() == 1);

    // the default (budget off): the same outage is retried as the spec says, store untouched
    harness e(down, settings{}, shared);
    e.prompt("hi");
    e.advance(2000ms + 4000ms + 8000ms);
    REQUIRE(e.done());
    CHECK(e.requests().size() == 4);
    CHECK(store->budget_levels()[0].tokens_milli == 1100);
}
