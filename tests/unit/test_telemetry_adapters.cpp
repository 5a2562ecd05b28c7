// The telemetry adapters (issue 22): the Prometheus metrics and the span records of a scripted
// run on the manual clock, exactly.

#include "support/session_harness.hpp"

#include <coagent/telemetry/prometheus_telemetry.hpp>
#include <coagent/telemetry/span_telemetry.hpp>

#include <catch2/catch.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <sstream>

using namespace coagent;
using namespace coagent::test;
using strings = std::vector<std::string>;

namespace {

const char* two_errors_then_ok =
    R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2,"usage":{"input":7,"output":2}},{"text":"Hello there","usage":{"input":10,"output":3}}])";

// the sample lines of `text` whose name starts with `prefix` (no # HELP / # TYPE)
strings samples(const std::string& text, std::string_view prefix) {
    strings out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.starts_with(prefix)) out.push_back(line);
    std::sort(out.begin(), out.end());  // a family's label sets come in hash order
    return out;
}

strings sorted(strings s) {
    std::sort(s.begin(), s.end());
    return s;
}

}  // namespace

TEST_CASE("prometheus_telemetry: the counters of a chain with two retries", "[telemetry]") {
    auto prom = std::make_shared<prometheus_telemetry>();
    harness h(two_errors_then_ok, settings{}, [&](session_options& o) { o.telemetry = prom; });
    h.prompt("hi");
    h.advance(6000ms);
    REQUIRE(h.done());
    const std::string t = prom->text();
    CHECK(samples(t, "coagent_prompts_total") ==
          strings{R"(coagent_prompts_total{outcome="succeeded"} 1)"});
    CHECK(samples(t, "coagent_chats_total") ==
          strings{R"(coagent_chats_total{model="faux",outcome="ok",provider="faux"} 1)"});
    CHECK(samples(t, "coagent_attempts_total") ==
          sorted({
              R"(coagent_attempts_total{model="faux",provider="faux",result="ok"} 1)",
              R"(coagent_attempts_total{model="faux",provider="faux",result="capacity"} 2)",
          }));
    CHECK(samples(t, "coagent_retries_total") ==
          strings{R"(coagent_retries_total{limit="capacity",model="faux",provider="faux"} 2)"});
    CHECK(samples(t, "coagent_tokens_total") ==
          strings{
              R"(coagent_tokens_total{model="faux",provider="faux",type="input",use="useful"} 10)",
              R"(coagent_tokens_total{model="faux",provider="faux",type="input",use="wasted"} 14)",
              R"(coagent_tokens_total{model="faux",provider="faux",type="output",use="useful"} 3)",
              R"(coagent_tokens_total{model="faux",provider="faux",type="output",use="wasted"} 4)",
          });
    CHECK(samples(t, "coagent_sessions_in_backoff") == strings{"coagent_sessions_in_backoff 0"});
    CHECK(samples(t, "coagent_backoff_seconds_sum") == strings{"coagent_backoff_seconds_sum 6"});
    CHECK(samples(t, "coagent_backoff_seconds_count") ==
          strings{"coagent_backoff_seconds_count 2"});
    CHECK(samples(t, "coagent_chat_duration_seconds_sum") ==
          strings{"coagent_chat_duration_seconds_sum 6"});
    CHECK(samples(t, "coagent_chat_duration_seconds_bucket{le=\"5.12\"}") ==
          strings{R"(coagent_chat_duration_seconds_bucket{le="5.12"} 0)"});
    CHECK(samples(t, "coagent_chat_duration_seconds_bucket{le=\"10.24\"}") ==
          strings{R"(coagent_chat_duration_seconds_bucket{le="10.24"} 1)"});
    CHECK(samples(t, "coagent_attempts_per_chat_sum") ==
          strings{"coagent_attempts_per_chat_sum 3"});
}

TEST_CASE("prometheus_telemetry: the gauge counts a session in backoff", "[telemetry]") {
    auto prom = std::make_shared<prometheus_telemetry>();
    harness h(two_errors_then_ok, settings{}, [&](session_options& o) { o.telemetry = prom; });
    h.prompt("hi");
    CHECK(samples(prom->text(), "coagent_sessions_in_backoff") ==
          strings{"coagent_sessions_in_backoff 1"});
    h.advance(6000ms);
    CHECK(samples(prom->text(), "coagent_sessions_in_backoff") ==
          strings{"coagent_sessions_in_backoff 0"});
}

TEST_CASE("span_telemetry: one record per attempt, chat and prompt, parented", "[telemetry]") {
    std::ostringstream os;
    auto logger = std::make_shared<spdlog::logger>(
        "spans", std::make_shared<spdlog::sinks::ostream_sink_st>(os));
    logger->set_pattern("%v");
    std::uint64_t next = 0;
    auto spans = std::make_shared<span_telemetry>(logger, [&next] { return ++next; });
    settings s;
    s.retry.max_retries = 1;
    harness h(R"([{"error":"503 Service Unavailable","status":503},{"text":"ok"}])", s,
              [&](session_options& o) { o.telemetry = spans; });
    h.prompt("hi");
    h.advance(2000ms);
    REQUIRE(h.done());
    strings lines;
    std::istringstream in(os.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    // ids: trace 1,2 -> 0x..01/0x..02; prompt span 3, chat span 4, attempts 5 and 6
    CHECK(
        lines ==
        strings{
            R"({"ts":"1970-01-01T00:00:00.000Z","name":"attempt","trace_id":"00000000000000010000000000000002","span_id":"0000000000000005","parent_span_id":"0000000000000004","start_unix_nano":0,"end_unix_nano":0,"status":"error","attributes":{"gen_ai.provider.name":"faux","gen_ai.request.model":"faux","http.request.resend_count":0,"gen_ai.usage.input_tokens":0,"gen_ai.usage.output_tokens":0,"error.type":"capacity","coagent.tokens.wasted":0}})",
            R"({"ts":"1970-01-01T00:00:02.000Z","name":"attempt","trace_id":"00000000000000010000000000000002","span_id":"0000000000000006","parent_span_id":"0000000000000004","start_unix_nano":2000000000,"end_unix_nano":2000000000,"status":"ok","attributes":{"gen_ai.provider.name":"faux","gen_ai.request.model":"faux","http.request.resend_count":1,"gen_ai.usage.input_tokens":1,"gen_ai.usage.output_tokens":1}})",
            R"({"ts":"1970-01-01T00:00:02.000Z","name":"chat faux","trace_id":"00000000000000010000000000000002","span_id":"0000000000000004","parent_span_id":"0000000000000003","start_unix_nano":0,"end_unix_nano":2000000000,"status":"ok","attributes":{"gen_ai.operation.name":"chat","gen_ai.provider.name":"faux","gen_ai.request.model":"faux","coagent.retry.attempt":1,"coagent.retry.delay_ms":2000,"coagent.retry.rule":"status/503","coagent.retry.limit":"capacity"}})",
            R"({"ts":"1970-01-01T00:00:02.000Z","name":"prompt","trace_id":"00000000000000010000000000000002","span_id":"0000000000000003","parent_span_id":"","start_unix_nano":0,"end_unix_nano":2000000000,"status":"ok","attributes":{"coagent.prompt.outcome":"succeeded"}})",
        });
}
