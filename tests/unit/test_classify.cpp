// coagent::classify — policy §2 and Appendix A: decision order, pattern table, message gate,
// silent overflow, retry hints, JSON output. Every line of tests/data/provider-errors.jsonl
// is registered as its own test case at start-up.

#include <catch2/catch.hpp>

#include <coagent/classify/classify.hpp>
#include <coagent/classify/patterns.hpp>
#include <coagent/runtime/time_math.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#ifndef COAGENT_SOURCE_DIR
#error "COAGENT_SOURCE_DIR must be defined (absolute path of the source tree)"
#endif

namespace {

using coagent::classification;
using coagent::classify;
using coagent::classify_error_text;
using coagent::error_kind;
using coagent::parse_retry_hint;
using coagent::pattern_table;

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();

// 2026-11-01T00:00:00Z: a fixed "now" for everything that is not about dates.
constexpr std::int64_t fixed_now = 1'793'491'200'000;

classification text(std::string_view t, std::optional<int> status = std::nullopt,
                    std::int64_t now = fixed_now) {
    return classify_error_text(t, status, now);
}

std::optional<std::int64_t> hint(std::string_view t, std::int64_t now = fixed_now) {
    return parse_retry_hint(t, now);
}

coagent::message assistant_error(std::optional<std::string> error_message,
                                 std::optional<int> status = std::nullopt) {
    coagent::message m;
    m.role = coagent::message_role::assistant;
    m.stop = coagent::stop_reason::error;
    m.error_message = std::move(error_message);
    m.error_status = status;
    return m;
}

std::optional<error_kind> kind_from_expect(std::string_view e) {
    if (e == "retryable") return error_kind::retryable;
    if (e == "usage_limit") return error_kind::usage_limit;
    if (e == "context_overflow") return error_kind::context_overflow;
    if (e == "none") return error_kind::none;
    return std::nullopt;
}

// ---- one test case per line of provider-errors.jsonl --------------------------------------

struct jsonl_case final : Catch::ITestInvoker {
    int line_no;
    std::string line;
    explicit jsonl_case(int n, std::string l) : line_no(n), line(std::move(l)) {}

    void invoke() const override {
        INFO("provider-errors.jsonl line " << line_no << ": " << line);
        const auto v = boost::json::parse(line).as_object();
        const std::string message(v.at("message").as_string());
        std::optional<int> status;
        if (const auto* s = v.if_contains("status")) status = static_cast<int>(s->to_number<int>());
        const auto expect = kind_from_expect(v.at("expect").as_string());
        REQUIRE(expect);

        const auto c = text(message, status);
        INFO("rule: " << c.rule);
        CHECK(c.kind == *expect);
        if (const auto* rule = v.if_contains("rule")) CHECK(c.rule == rule->as_string());
        CHECK(c.status == status);
        if (*expect == error_kind::none) {
            CHECK(c.rule == "none");
        } else {
            CHECK(c.rule != "none");
        }
        CHECK(c.retryable() ==
              (*expect == error_kind::retryable || *expect == error_kind::usage_limit));
        // every line states the kind of limit it must get (none when not retryable)
        REQUIRE(v.contains("limit"));
        CHECK(coagent::to_string(c.limit) == v.at("limit").as_string());
        CHECK((c.limit == coagent::limit_kind::none) == !c.retryable());

        // The same text through the message gate decides the same way.
        const auto g = classify(assistant_error(message, status), coagent::model_info{}, fixed_now);
        CHECK(g.kind == c.kind);
        CHECK(g.rule == c.rule);
    }
};

struct failing_case final : Catch::ITestInvoker {
    std::string why;
    explicit failing_case(std::string w) : why(std::move(w)) {}
    void invoke() const override { FAIL(why); }
};

struct register_jsonl_cases {
    std::vector<std::unique_ptr<Catch::AutoReg>> regs;

    void add(Catch::ITestInvoker* invoker, const std::string& name) {
        regs.push_back(std::make_unique<Catch::AutoReg>(
            invoker, CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
            Catch::NameAndTags(Catch::StringRef(name), "[classify][jsonl]")));
    }

    register_jsonl_cases() {
        const std::string path =
            std::string(COAGENT_SOURCE_DIR) + "/tests/data/provider-errors.jsonl";
        std::ifstream in(path);
        if (!in) {
            add(new failing_case("cannot read " + path), "provider-errors.jsonl is readable");
            return;
        }
        std::string l;
        int n = 0, cases = 0;
        while (std::getline(in, l)) {
            ++n;
            if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
            std::ostringstream name;
            name << "provider-errors.jsonl line " << (n < 10 ? "0" : "") << n;
            add(new jsonl_case(n, l), name.str());
            ++cases;
        }
        if (cases == 0)
            add(new failing_case(path + " has no cases"), "provider-errors.jsonl has cases");
    }
};

const register_jsonl_cases jsonl_registration;

// ---- the pattern table ------------------------------------------------------------------

std::vector<std::string_view> names_of(std::string_view table) {
    std::vector<std::string_view> out;
    for (const auto& e : pattern_table()) {
        if (e.table == table) out.push_back(e.name);
    }
    return out;
}

std::string rule_of(const coagent::pattern_entry& e) {
    return std::string(e.table) + "/" + std::string(e.name);
}

}  // namespace

TEST_CASE("pattern table holds every Appendix A entry, in order", "[classify][table]") {
    CHECK_FALSE(coagent::pattern_table_version.empty());

    const std::vector<std::string_view> overflow{
        "prompt is too long",
        "request_too_large",
        "input is too long for requested model",
        "exceeds the context window",
        "input token count.*exceeds the maximum",
        R"(maximum prompt length is \d+)",
        "reduce the length of the messages",
        R"(maximum context length is \d+ tokens)",
        R"(exceeds the limit of \d+)",
        "exceeds the available context size",
        "greater than the context length",
        "context window exceeds limit",
        "exceeded model token limit",
        R"(too large for model with \d+ maximum context length)",
        "model_context_window_exceeded",
        "prompt too long; exceeded (?:max )?context length",
        "context[_ ]length[_ ]exceeded",
        "too many tokens",
        "token limit exceeded",
        "requested tokens?.*exceed.*context (window|length|size)",
        "context (window|length|size).*(exceeded|overflow|too small)",
        "(prompt|input).*(too long|too large).*(context|n_ctx)",
        "request exceeds the maximum size",
        "payload too large",
        "entity too large",
        R"(^4(?:00|13)\s*(?:status code)?\s*\(no body\))",
    };
    const std::vector<std::string_view> non_overflow{
        "^(Throttling error|Service unavailable):", "rate limit", "too many requests"};
    const std::vector<std::string_view> usage_limit{
        "usage.?limit", "usage_limit_reached", "usage_not_included", "limit_reached",
        "quota.?exceeded", "resource.?exhausted",
        // beyond Appendix A (table 2026.11.2)
        "insufficient_quota", "exceeded your current quota"};
    const std::vector<std::string_view> retryable{
        // the specification's list
        "overloaded", "rate.?limit", "usage.?limit", "too many requests", "429", "500", "502",
        "503", "504", "service.?unavailable", "server.?error", "internal.?error",
        "connection.?error", "fetch failed", "retry delay",
        // later transport phrases
        "network.?error", "connection.?refused", "connection.?lost", "other side closed",
        "upstream.?connect", "reset before headers", "socket hang up", "timed? out", "timeout",
        "terminated", "ended without", "stream stall", "provider.?returned.?error"};

    CHECK(names_of("overflow") == overflow);
    CHECK(names_of("non_overflow") == non_overflow);
    CHECK(names_of("usage_limit") == usage_limit);
    CHECK(names_of("retryable") == retryable);
    CHECK(names_of("hint").size() == 9);

    std::vector<int> statuses;
    for (const auto& s : coagent::retryable_statuses()) {
        statuses.push_back(s.code);
        CHECK_FALSE(s.source.empty());
    }
    CHECK(statuses == std::vector<int>{408, 429, 500, 502, 503, 504, 529});

    std::set<std::string> rules;
    for (const auto& e : pattern_table()) {
        CHECK_FALSE(e.source.empty());
        CHECK(rules.insert(rule_of(e)).second);  // rule strings are unique
    }
}

TEST_CASE("every pattern table entry matches its example", "[classify][table]") {
    const auto table = pattern_table();
    for (std::size_t i = 0; i < table.size(); ++i) {
        const auto& e = table[i];
        INFO(rule_of(e) << " (" << e.source << ") example: " << e.example);
        CHECK(coagent::pattern_matches(i, e.example));
    }
    CHECK_THROWS_AS(coagent::pattern_matches(table.size(), "x"), std::out_of_range);
}

TEST_CASE("each decision-table example is decided by its own entry", "[classify][table]") {
    // Entries that an earlier, broader entry (or an earlier table) always wins over: their
    // example still matches them (test above), but the decision names the winner.
    const std::map<std::string, std::string> shadowed{
        {"usage_limit/usage_limit_reached", "usage_limit/usage.?limit"},
        {"retryable/usage.?limit", "usage_limit/usage.?limit"},
    };
    for (const auto& e : pattern_table()) {
        if (e.table == "hint" || e.table == "non_overflow") continue;
        const auto rule = rule_of(e);
        INFO(rule << " example: " << e.example);
        const auto c = text(e.example);
        const auto it = shadowed.find(rule);
        CHECK(c.rule == (it == shadowed.end() ? rule : it->second));
        const auto expect = e.table == "overflow"      ? error_kind::context_overflow
                            : e.table == "usage_limit" ? error_kind::usage_limit
                                                       : error_kind::retryable;
        if (it == shadowed.end()) CHECK(c.kind == expect);
    }
}

TEST_CASE("each exclusion example contains an overflow phrase yet is not an overflow",
          "[classify][table]") {
    const auto table = pattern_table();
    for (const auto& e : table) {
        if (e.table != "non_overflow") continue;
        INFO(rule_of(e) << " example: " << e.example);
        bool overflow_phrase = false;
        for (std::size_t i = 0; i < table.size(); ++i) {
            if (table[i].table == "overflow" && coagent::pattern_matches(i, e.example))
                overflow_phrase = true;
        }
        CHECK(overflow_phrase);
        CHECK(text(e.example).kind != error_kind::context_overflow);
    }
}

TEST_CASE("each hint example is parsed by its own form", "[classify][table][hint]") {
    const auto table = pattern_table();
    for (std::size_t i = 0; i < table.size(); ++i) {
        if (table[i].table != "hint") continue;
        INFO(rule_of(table[i]) << " example: " << table[i].example);
        CHECK(hint(table[i].example, 0).has_value());
        // no earlier form matches it, so this form is the one that fires
        for (std::size_t j = 0; j < i; ++j) {
            if (table[j].table == "hint")
                CHECK_FALSE(coagent::pattern_matches(j, table[i].example));
        }
    }
}

// ---- decision order, status, exclusions -----------------------------------------------------

TEST_CASE(
    "inside a decision table the first entry in table order wins, not the first match in "
    "the text (§A.5)",
    "[classify][table]") {
    // "502" comes first in the text, but "overloaded" comes first in the retryable table
    CHECK(text("502 upstream overloaded").rule == "retryable/overloaded");
    // overflow: "prompt is too long" precedes "too many tokens" in the table
    CHECK(text("too many tokens: the prompt is too long").rule == "overflow/prompt is too long");
    // usage limit: "usage.?limit" precedes "quota.?exceeded"
    CHECK(text("quota exceeded (usage limit)").rule == "usage_limit/usage.?limit");
}

TEST_CASE("status numbers in the text match only as whole tokens", "[classify][status]") {
    CHECK(text("400 Bad Request (request id req_5001234)").kind == error_kind::none);
    CHECK(text("trace 4295017").kind == error_kind::none);
    CHECK(text("error 5030").kind == error_kind::none);
    CHECK(text("id=a502b").kind == error_kind::none);
    CHECK(text("HTTP 429").rule == "retryable/429");
    CHECK(text("upstream: 502.").rule == "retryable/502");
    CHECK(text("code=503").rule == "retryable/503");
    CHECK(text("(504)").rule == "retryable/504");
    CHECK(text("500").rule == "retryable/500");
}

TEST_CASE("a retryable HTTP status decides after overflow and usage limit", "[classify][status]") {
    for (const auto& s : coagent::retryable_statuses()) {
        INFO("status " << s.code);
        const auto c = text("something went wrong", s.code);
        CHECK(c.kind == error_kind::retryable);
        CHECK(c.rule == "status/" + std::to_string(s.code));
        CHECK(c.status == s.code);
    }
    for (int code : {400, 401, 403, 404, 413, 422}) {
        INFO("status " << code);
        CHECK(text("something went wrong", code).kind == error_kind::none);
    }
    // the status beats the text patterns...
    CHECK(text("overloaded", 503).rule == "status/503");
    // ...but not overflow or usage limit
    CHECK(text("request_too_large", 413).rule == "overflow/request_too_large");
    CHECK(text("prompt is too long", 503).rule == "overflow/prompt is too long");
    CHECK(text("The usage limit has been reached", 429).rule == "usage_limit/usage.?limit");
    // no status given → the text alone decides
    CHECK(text("something went wrong").status == std::nullopt);
}

TEST_CASE("non-overflow exclusions", "[classify][overflow]") {
    auto c = text("Service unavailable: too many tokens in flight");
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "retryable/service.?unavailable");
    c = text("Throttling error: Too many tokens, please wait before trying again.");
    CHECK(c.kind == error_kind::none);
    c = text("rate limit: too many tokens per minute");
    CHECK(c.rule == "retryable/rate.?limit");
    c = text("Too many requests: token limit exceeded for this minute");
    CHECK(c.rule == "retryable/too many requests");
    // the first exclusion is anchored at the start of the text
    c = text("Error: Service unavailable: prompt is too long");
    CHECK(c.rule == "overflow/prompt is too long");
    // "rate limit" excludes, "rate_limit" does not (the exclusion is spelled with a space)
    CHECK(text("rate_limit: prompt is too long").kind == error_kind::context_overflow);
    // overflow wins over retryable patterns when no exclusion matches
    CHECK(text("overloaded: prompt is too long").rule == "overflow/prompt is too long");
    CHECK(text("400 status code (no body)").rule ==
          R"(overflow/^4(?:00|13)\s*(?:status code)?\s*\(no body\))");
    CHECK(text("error 400 status code (no body)").kind == error_kind::none);
}

TEST_CASE("exclusions are tried without a leading HTTP status (issue 15)",
          "[classify][overflow][issue-15]") {
    // an HTTP error's text starts with its status: the anchored exclusion still applies
    auto c = text("429 Throttling error: Too many tokens, please wait before trying again.");
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "retryable/429");
    c = text("503 Service unavailable: too many tokens in flight");
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "retryable/503");
    c = text("503 Service unavailable: too many tokens in flight", 503);
    CHECK(c.rule == "status/503");
    // the same text without a status is excluded as before (no retryable pattern: none)
    CHECK(text("400 Throttling error: Too many tokens").kind == error_kind::none);
    // only a status (three digits, then blanks) is removed, and only one
    CHECK(text("4290 Throttling error: too many tokens").kind == error_kind::context_overflow);
    CHECK(text("400Throttling error: too many tokens").kind == error_kind::context_overflow);
    CHECK(text("400 400 Throttling error: too many tokens").kind == error_kind::context_overflow);
    // an overflow with a status but no exclusion is still an overflow
    CHECK(text("400 prompt is too long: 213462 tokens > 200000 maximum", 400).kind ==
          error_kind::context_overflow);
}

TEST_CASE("an overflow pattern never wins when the status is 429 (issue 15)",
          "[classify][overflow][issue-15]") {
    // from the status the provider gave
    auto c = text("429 Throttling error: Too many tokens, please wait before trying again.", 429);
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "status/429");
    c = text("ThrottlingException: Too many tokens, please wait before trying again.", 429);
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "status/429");
    c = text("Too many tokens", 429);
    CHECK(c.rule == "status/429");
    // from a leading "429 " in the text, without a status: the retryable rule that matched
    c = text("429 Too many tokens for this minute");
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "retryable/429");
    c = text("429 prompt is too long");
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "retryable/429");
    // a usage limit in a 429 stays a usage limit
    CHECK(text("429 too many tokens: usage limit reached", 429).kind == error_kind::usage_limit);
    // other statuses do not skip the overflow check
    CHECK(text("Too many tokens", 400).kind == error_kind::context_overflow);
    CHECK(text("Too many tokens", 503).kind == error_kind::context_overflow);
    CHECK(text("4295 too many tokens").kind == error_kind::context_overflow);
}

TEST_CASE("rule strings name the table and the entry", "[classify][rule]") {
    CHECK(text("400 prompt is too long: 213462 tokens > 200000 maximum", 400).rule ==
          "overflow/prompt is too long");
    CHECK(text("You have reached your usage limit for this period").rule ==
          "usage_limit/usage.?limit");
    CHECK(text("quota exceeded").rule == "usage_limit/quota.?exceeded");
    CHECK(text("503 Service Unavailable", 503).rule == "status/503");
    CHECK(text("Service Unavailable").rule == "retryable/service.?unavailable");
    CHECK(text("upstream overloaded").rule == "retryable/overloaded");
    CHECK(text("Connection error.").rule == "retryable/connection.?error");
    CHECK(text("socket hang up").rule == "retryable/socket hang up");
    CHECK(text("401 Incorrect API key provided").rule == "none");
    CHECK(text("").rule == "none");
    CHECK(text("RATE LIMIT").rule == "retryable/rate.?limit");  // case-insensitive
}

TEST_CASE("provider error type, status and hint are filled in", "[classify]") {
    auto c = text(
        R"(529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})", 529);
    CHECK(c.provider_error_type == "overloaded_error");
    CHECK(c.status == 529);
    CHECK(c.rule == "status/529");
    c = text(R"({"type": "error", "error": {"type": "rate_limit_error", "message": "x"}})");
    CHECK(c.provider_error_type == "rate_limit_error");
    CHECK(c.rule == "retryable/rate.?limit");
    CHECK(text("invalid_request_error: tools.0.name").provider_error_type.empty());
    c = text("429 Rate limit reached. Please try again in 1.898s.", 429);
    CHECK(c.retry_after_ms == 1898);
    CHECK(text("overloaded").retry_after_ms == std::nullopt);
}

// ---- the message gate and silent overflow ---------------------------------------------------

TEST_CASE("the gate: only assistant errors with an error message classify", "[classify][gate]") {
    const coagent::model_info model{};
    auto m = assistant_error("503 Service Unavailable: upstream overloaded", 503);
    auto c = classify(m, model, fixed_now);
    CHECK(c.kind == error_kind::retryable);
    CHECK(c.rule == "status/503");
    CHECK(c.status == 503);

    SECTION("stop reason not error → none") {
        for (auto stop : {coagent::stop_reason::stop, coagent::stop_reason::length,
                          coagent::stop_reason::tool_use}) {
            m.stop = stop;
            c = classify(m, model, fixed_now);
            CHECK(c.kind == error_kind::none);
            CHECK(c.rule == "none");
        }
    }
    SECTION("aborted → none, never retryable") {
        m.stop = coagent::stop_reason::aborted;
        c = classify(m, model, fixed_now);
        CHECK(c.kind == error_kind::none);
        CHECK_FALSE(c.retryable());
    }
    SECTION("missing or empty error message → none") {
        m.error_message.reset();
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
        m.error_message = "";
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
    }
    SECTION("not an assistant message → none") {
        m.role = coagent::message_role::user;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
        m.role = coagent::message_role::tool_result;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
    }
    SECTION("the message's status and error type are used") {
        m = assistant_error("Overloaded", 529);
        m.error_type = "overloaded_error";
        c = classify(m, model, fixed_now);
        CHECK(c.rule == "status/529");
        CHECK(c.provider_error_type == "overloaded_error");
    }
    SECTION("an overflow error is an overflow, not retryable") {
        m = assistant_error("400 prompt is too long: 213462 tokens > 200000 maximum", 400);
        c = classify(m, model, fixed_now);
        CHECK(c.kind == error_kind::context_overflow);
        CHECK_FALSE(c.retryable());
    }
}

TEST_CASE("silent overflow: a stop whose input + cacheRead exceeds a known window",
          "[classify][overflow]") {
    coagent::message m;
    m.role = coagent::message_role::assistant;
    m.stop = coagent::stop_reason::stop;
    m.usage.input = 900;
    m.usage.cache_read = 200;
    coagent::model_info model;
    model.context_window = 1000;

    auto c = classify(m, model, fixed_now);
    CHECK(c.kind == error_kind::context_overflow);
    CHECK(c.rule == "overflow/silent usage");
    CHECK_FALSE(c.retryable());

    SECTION("unknown window → none") {
        model.context_window = 0;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
    }
    SECTION("exactly the window → none") {
        m.usage.cache_read = 100;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
    }
    SECTION("output and cache writes do not count") {
        m.usage.cache_read = 0;
        m.usage.output = 5000;
        m.usage.cache_write = 5000;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
    }
    SECTION("only for stop reason stop") {
        m.stop = coagent::stop_reason::length;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
        m.stop = coagent::stop_reason::aborted;
        CHECK(classify(m, model, fixed_now).kind == error_kind::none);
    }
    SECTION("huge counts saturate instead of overflowing") {
        m.usage.input = int64_max;
        m.usage.cache_read = int64_max;
        CHECK(classify(m, model, fixed_now).kind == error_kind::context_overflow);
    }
}

// ---- retry hints ----------------------------------------------------------------------------

TEST_CASE("hint: retry-after-ms and retry-after seconds", "[classify][hint]") {
    CHECK(hint("429 Rate limit reached for requests retry-after-ms=1000") == 1000);
    CHECK(hint("Retry-After-Ms: 1500") == 1500);
    CHECK(hint("retry-after: 30") == 30000);
    CHECK(hint("Retry-After=1.5") == 1500);
    CHECK(hint("retry-after: 0.0001") == 1);  // rounded up to whole ms
    CHECK(hint("retry-after: 0") == 0);
}

TEST_CASE("hint: retry-after HTTP-date", "[classify][hint]") {
    // Wed, 21 Oct 2026 07:28:00 GMT = 1792567680 s
    constexpr std::int64_t date = 1'792'567'680'000;
    CHECK(hint("retry-after: Wed, 21 Oct 2026 07:28:00 GMT", date - 30'000) == 30'000);
    CHECK(hint("Retry-After: wed, 21 OCT 2026 07:28:00 GMT", date - 1) == 1);
    CHECK(hint("retry-after: Wed, 21 Oct 2026 07:28:00 GMT", date + 5'000) == 0);  // past → 0
    CHECK(hint("retry-after: Sun, 1 Mar 2026 00:00:00 GMT", 0) == 1'772'323'200'000);
    CHECK(hint("retry-after: Sat, 29 Feb 2020 12:00:00 GMT", 0) == 1'582'977'600'000);
    CHECK(hint("retry-after: Wed, 31 Feb 2026 07:28:00 GMT", 0) == std::nullopt);  // no such day
    CHECK(hint("retry-after: Wed, 21 Foo 2026 07:28:00 GMT", 0) == std::nullopt);
    CHECK(hint("retry-after: Wed, 21 Oct 2026 24:00:00 GMT", 0) == std::nullopt);
}

TEST_CASE("hint: x-ratelimit-reset-ms and x-ratelimit-reset", "[classify][hint]") {
    CHECK(hint("x-ratelimit-reset-ms: 1500") == 1500);
    CHECK(hint("x-ratelimit-reset-ms=" + std::to_string(fixed_now + 2500)) == 2500);  // epoch ms
    CHECK(hint("x-ratelimit-reset-ms: " + std::to_string(fixed_now - 2500)) == 0);
    CHECK(hint("x-ratelimit-reset: 20") == 20'000);
    CHECK(hint("x-ratelimit-reset: " + std::to_string(fixed_now / 1000 + 7)) == 7'000);  // epoch s
    CHECK(hint("x-ratelimit-reset: " + std::to_string(fixed_now / 1000 - 7)) == 0);
    CHECK(hint("x-ratelimit-reset: 1000000000") == 1'000'000'000'000);  // not above 1e9: seconds
}

TEST_CASE("hint: try again in / retry after a number with a unit", "[classify][hint]") {
    CHECK(hint("Please try again in 1.898s.") == 1898);
    CHECK(hint("Please retry in 41.8s") == 41'800);
    CHECK(hint("retry after 33 seconds") == 33'000);
    CHECK(hint("try again in 500ms") == 500);
    CHECK(hint("retry in 1.5ms") == 2);
    CHECK(hint("Retry after 2 secs") == 2000);
    CHECK(hint("try again in 1 sec") == 1000);
    CHECK(hint("try again in 0.0001s") == 1);
}

TEST_CASE("hint: try again in a duration sums its parts", "[classify][hint]") {
    CHECK(hint("The usage_limit_reached error occurred; try again in 2h 3m") == 7'380'000);
    CHECK(hint("try again in 1 day 2 hours") == 93'600'000);
    CHECK(hint("try again in 5 minutes 10 seconds") == 310'000);
    CHECK(hint("try again in 3d") == 259'200'000);
}

TEST_CASE("hint: limit reached|epoch seconds", "[classify][hint]") {
    constexpr std::int64_t reset = 1'755'772'800'000;
    CHECK(hint("Claude AI usage limit reached|1755772800", reset - 60'000) == 60'000);
    CHECK(hint("Claude AI usage limit reached|1755772800", fixed_now) == 0);  // past → 0
    CHECK(hint("limit reached|12345678") == std::nullopt);                    // too few digits
}

TEST_CASE("hint: resets at an ISO 8601 time", "[classify][hint]") {
    constexpr std::int64_t t = 1'795'975'200'000;  // 2026-11-29T18:00:00Z
    CHECK(hint("resets at 2026-11-29T18:00:00Z", t - 3'600'000) == 3'600'000);
    CHECK(hint("Your limit resets at 2026-11-29T18:00Z", t - 1000) == 1000);
    CHECK(hint("reset at 2026-11-29T20:00:00+02:00", t - 1000) == 1000);
    CHECK(hint("resets at 2026-11-29T10:00:00-0800", t - 1000) == 1000);
    CHECK(hint("resets at 2026-11-29T18:00:00.0005Z", t) == 1);  // sub-ms rounds up
    CHECK(hint("resets at 2026-11-29T18:00:00.250Z", t) == 250);
    CHECK(hint("resets at 2026-11-29T18:00:00Z", t + 1) == 0);  // past → 0
    CHECK(hint("resets at 2026-13-29T18:00:00Z", 0) == std::nullopt);
    CHECK(hint("resets 5am") == std::nullopt);  // wall clock without date or zone
}

TEST_CASE("hint: first form in table order wins, not first in the text", "[classify][hint]") {
    CHECK(hint("retry-after-ms=100 retry-after: 30") == 100);
    CHECK(hint("try again in 5s (retry-after: 30)") == 30'000);
    CHECK(hint("x-ratelimit-reset: 9 x-ratelimit-reset-ms: 7") == 7);
    // a form whose capture is not a valid value gives way to the next form
    CHECK(hint("retry-after: Wed, 31 Feb 2026 07:28:00 GMT; try again in 4s") == 4000);
    CHECK(hint("nothing to see here") == std::nullopt);
}

TEST_CASE("hint: huge numbers saturate, never overflow", "[classify][hint]") {
    CHECK(hint("retry-after-ms=99999999999999999999999") == int64_max);
    CHECK(hint("retry-after: 99999999999999999999.5") == int64_max);
    CHECK(hint("x-ratelimit-reset: 99999999999999999999", int64_min) == int64_max);
    CHECK(hint("x-ratelimit-reset-ms: 99999999999999999999", int64_min) == int64_max);
    CHECK(hint("x-ratelimit-reset-ms: 99999999999999999999", int64_max) == 0);
    CHECK(hint("try again in 99999999999999999999d 5h") == int64_max);
    CHECK(hint("usage limit reached|99999999999", int64_min) == int64_max);
    CHECK(hint("resets at 9999-12-31T23:59:59Z", int64_min) == int64_max);
    CHECK(hint("retry-after: Fri, 31 Dec 9999 23:59:59 GMT", int64_min) == int64_max);
    CHECK(hint("resets at 0000-01-01T00:00:00Z", int64_max) == 0);
}

// ---- JSON -----------------------------------------------------------------------------------

TEST_CASE("to_json and to_string", "[classify][json]") {
    CHECK(coagent::to_string(error_kind::none) == "none");
    CHECK(coagent::to_string(error_kind::retryable) == "retryable");
    CHECK(coagent::to_string(error_kind::usage_limit) == "usage_limit");
    CHECK(coagent::to_string(error_kind::context_overflow) == "context_overflow");

    auto s = [](const classification& c) { return boost::json::serialize(coagent::to_json(c)); };
    CHECK(s(text("503 Service Unavailable", 503)) ==
          R"({"kind":"retryable","retryable":true,"rule":"status/503","limit":"capacity"})");
    CHECK(
        s(text("429 Too Many Requests retry-after-ms=1500", 429)) ==
        R"({"kind":"retryable","retryable":true,"rule":"status/429","limit":"rate","retryAfterMs":1500})");
    CHECK(
        s(text("You have reached your usage limit")) ==
        R"({"kind":"usage_limit","retryable":true,"rule":"usage_limit/usage.?limit","limit":"quota"})");
    CHECK(
        s(text("prompt is too long")) ==
        R"({"kind":"context_overflow","retryable":false,"rule":"overflow/prompt is too long","limit":"none"})");
    CHECK(s(text("401 Unauthorized", 401)) ==
          R"({"kind":"none","retryable":false,"rule":"none","limit":"none"})");
}

// ---- the policy document's tables are generated from this table ------------------------------

namespace {

std::string md_cell(std::string_view s) {
    std::string out;
    for (char ch : s) {
        if (ch == '|')
            out += "\\|";  // a pipe inside a table cell (GFM), also in code spans
        else if (ch == '\n')
            out += ' ';
        else
            out += ch;
    }
    return out;
}

/// The Appendix A block of docs/retry-policy.md, as this table says it must read.
std::string generated_pattern_tables() {
    std::ostringstream o;
    o << "Pattern table version `" << coagent::pattern_table_version << "` ("
      << pattern_table().size()
      << " entries). Every regular expression is RE2 syntax, matched case-insensitively anywhere "
         "in the text; a decision names its entry as `<table>/<name>`.\n";
    const std::pair<std::string_view, std::string_view> titles[] = {
        {"overflow",
         "Context overflow (wins over every retryable pattern, unless an exclusion matches)"},
        {"non_overflow", "Non-overflow exclusions"},
        {"usage_limit", "Usage limit (a retryable subclass, §3 step 7)"},
        {"retryable", "Retryable"},
        {"hint", "Retry hints (tried in this order; the first form that matches gives the wait)"},
    };
    for (const auto& [table, title] : titles) {
        // the tables whose entries decide a retry also say what kind of limit it is
        const bool limits = table == "usage_limit" || table == "retryable";
        o << "\n**" << title << "**\n\n| entry | regex |" << (limits ? " limit |" : "")
          << " source | example |\n|---|---|" << (limits ? "---|" : "") << "---|---|\n";
        for (const auto& e : pattern_table())
            if (e.table == table) {
                o << "| `" << md_cell(e.name) << "` | `" << md_cell(e.regex) << "` | ";
                if (limits) o << "`" << coagent::to_string(e.limit) << "` | ";
                o << md_cell(e.source) << " | `" << md_cell(e.example) << "` |\n";
            }
    }
    o << "\n**Retryable HTTP statuses** (when the provider gave one; rule `status/<code>`)\n\n"
         "| status | limit | meaning |\n|---|---|---|\n";
    for (const auto& s : coagent::retryable_statuses())
        o << "| " << s.code << " | `" << coagent::to_string(s.limit) << "` | " << md_cell(s.source)
          << " |\n";
    return o.str();
}

}  // namespace

TEST_CASE("docs: the pattern tables of docs/retry-policy.md are the classifier's",
          "[classify][table][docs]") {
    const std::string path = std::string(COAGENT_SOURCE_DIR) + "/docs/retry-policy.md";
    std::ifstream in(path);
    REQUIRE(in);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string doc = buf.str();
    const std::string begin = "<!-- pattern-table:begin";
    const std::string end = "<!-- pattern-table:end -->";
    const auto b = doc.find(begin);
    REQUIRE(b != std::string::npos);
    const auto body = doc.find('\n', b) + 1;
    const auto e = doc.find(end, body);
    REQUIRE(e != std::string::npos);
    const std::string in_doc = doc.substr(body, e - body);
    const std::string want = generated_pattern_tables();
    if (in_doc != want) {
        // the block to paste: written next to the test binary's working directory
        std::ofstream("pattern-tables.generated.md") << want;
        FAIL("the Appendix A block of "
             << path
             << " differs from classify/src/patterns.cpp: replace the block between the "
                "pattern-table markers with pattern-tables.generated.md (written in the "
                "test's working directory)");
    }
}

// ---- <coagent/runtime/time_math.hpp>: the one place for dates and saturating ms ---------------

TEST_CASE("time math: saturating arithmetic and displayed seconds", "[time_math]") {
    constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
    constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
    struct row {
        std::int64_t a, b, add, sub, mul;
    };
    const row rows[] = {
        {2, 3, 5, -1, 6},
        {max, 1, max, max - 1, max},
        {min, 1, min + 1, min, min},
        {min, -1, min, min + 1, max},
        {max, -2, max - 2, max, min},
        {0, min, min, max, 0},
    };
    for (const auto& r : rows) {
        INFO(r.a << " " << r.b);
        CHECK(coagent::sat_add(r.a, r.b) == r.add);
        CHECK(coagent::sat_sub(r.a, r.b) == r.sub);
        CHECK(coagent::sat_mul(r.a, r.b) == r.mul);
    }
    const std::pair<std::int64_t, std::int64_t> seconds[] = {
        {min, 0},  {-5, 0},   {0, 0},    {1, 1},         {999, 1},
        {1000, 1}, {1001, 2}, {2500, 3}, {120'000, 120}, {max, max / 1000 + 1}};
    for (const auto& [ms, s] : seconds) {
        INFO(ms);
        CHECK(coagent::displayed_seconds(ms) == s);
    }
}

TEST_CASE("time math: civil dates and HTTP-dates", "[time_math]") {
    using coagent::day_check;
    CHECK(coagent::days_from_civil(1970, 1, 1) == 0);
    CHECK(coagent::days_from_civil(1969, 12, 31) == -1);
    CHECK(coagent::days_from_civil(2000, 3, 1) == 11017);
    CHECK(coagent::days_from_civil(2026, 2, 31) == coagent::days_from_civil(2026, 3, 3));
    CHECK(coagent::days_in_month(2024, 2) == 29);
    CHECK(coagent::days_in_month(2100, 2) == 28);
    CHECK(coagent::days_in_month(2000, 2) == 29);
    struct row {
        const char* text;
        std::optional<std::int64_t> calendar, up_to_31;
    };
    const std::int64_t nov6 = 784'111'777'000;    // 1994-11-06T08:49:37Z
    const std::int64_t mar3 = 1'772'496'000'000;  // 2026-03-03T00:00:00Z
    const row rows[] = {
        {"Sun, 06 Nov 1994 08:49:37 GMT", nov6, nov6},
        {"  sun, 6 nov 1994 08:49:37 gmt ", nov6, nov6},
        {"Sunday, 06-Nov-94 08:49:37 GMT", nov6, nov6},
        {"Sun Nov  6 08:49:37 1994", nov6, nov6},
        {"Thu, 01 Jan 1970 00:00:01 GMT", 1000, 1000},
        {"Wed, 31 Dec 1969 23:59:59 GMT", -1000, -1000},
        {"Thu, 01 Jan 1970 23:59:60 GMT", 86'400'000, 86'400'000},  // leap second
        {"Sat, 29 Feb 2020 12:00:00 GMT", 1'582'977'600'000, 1'582'977'600'000},
        {"Tue, 31 Feb 2026 00:00:00 GMT", std::nullopt, mar3},
        {"Thu, 32 Jan 1970 00:00:01 GMT", std::nullopt, std::nullopt},
        {"Thu, 00 Jan 1970 00:00:01 GMT", std::nullopt, std::nullopt},
        {"Thu, 01 Foo 1970 00:00:01 GMT", std::nullopt, std::nullopt},
        {"Thu, 01 Jan 1970 24:00:00 GMT", std::nullopt, std::nullopt},
        {"Thu, 01 Jan 1970 00:60:00 GMT", std::nullopt, std::nullopt},
        {"Thu, 01 Jan 1970 00:00:01 UTC", std::nullopt, std::nullopt},
        {"Thu, 01 Jan 70 00:00:01 GMT", std::nullopt, std::nullopt},
        {"Thu, 01 Jan 1970 0:00:01 GMT", std::nullopt, std::nullopt},
        {"Sunday, 06-Nov-1994 08:49:37 GMT", std::nullopt, std::nullopt},
        {"", std::nullopt, std::nullopt},
        {"soon", std::nullopt, std::nullopt},
    };
    for (const auto& r : rows) {
        INFO(r.text);
        CHECK(coagent::parse_http_date(r.text) == r.calendar);
        CHECK(coagent::parse_http_date(r.text, day_check::up_to_31) == r.up_to_31);
    }
}
