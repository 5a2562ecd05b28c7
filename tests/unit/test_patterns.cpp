// coagent::classify — the regexes of the pattern table themselves (docs/retry-policy.md
// Appendix A, classify/src/patterns.cpp). Every entry of pattern_table(), keyed by its rule
// string "<table>/<name>", has texts it must match (including an upper- or mixed-case one:
// the table is compiled case-insensitive) and near misses it must not match (the text a
// plausible drift would wrongly accept: `.?` turned into `.*`, a dropped `\b` or `^`, a
// separator made optional, a unit or digit count loosened). Each text goes through
// pattern_matches(), i.e. the very RE2 object the classifier compiled.
//
// So a regex change that widens or narrows an entry fails here, not only one whose example
// stops matching; a renamed, added or removed entry fails too, until its row below is
// updated. The rows pin today's regexes: where a near miss is surprising (say
// `non_overflow/^(Throttling error|Service unavailable):` does not match
// "429 Throttling error: …" because of its anchor), that is the current behaviour, and
// changing it is a table change (bump pattern_table_version) that updates the row here.

#include <catch2/catch.hpp>

#include <coagent/classify/patterns.hpp>

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {
namespace {

struct cases {
    std::vector<std::string_view> match;     // each must match somewhere in the text
    std::vector<std::string_view> no_match;  // near misses: none may match
};

std::string rule_of(const pattern_entry& e) {
    std::string r(e.table);
    r += '/';
    r += e.name;
    return r;
}

// Keyed by rule string, in table order.
const std::map<std::string, cases>& pattern_cases() {
    static const std::map<std::string, cases> m{
        // ---- overflow ----------------------------------------------------------------------
        {"overflow/prompt is too long",
         {{"400 prompt is too long: 213462 tokens > 200000 maximum", "PROMPT IS TOO LONG",
           "Prompt Is Too Long"},
          {"prompt is long", "prompt was too long", "prompt is not too long", "promptis too long",
           "prompt  is too long"}}},
        {"overflow/request_too_large",
         {{"request_too_large: Request exceeds the maximum size", "REQUEST_TOO_LARGE",
           R"re({"type":"Request_Too_Large"})re"},
          {"request too large", "request-too-large", "request_too_larg", "requests_too_large"}}},
        {"overflow/input is too long for requested model",
         {{"ValidationException: Input is too long for requested model.",
           "INPUT IS TOO LONG FOR REQUESTED MODEL"},
          {"input is too long for the requested model", "input was too long for requested model",
           "input is too long", "input_is_too_long_for_requested_model"}}},
        {"overflow/exceeds the context window",
         {{"Your input exceeds the context window of this model", "EXCEEDS THE CONTEXT WINDOW"},
          {"exceeds the context", "exceeded the context window", "exceeds a context window",
           "exceeds the context_window"}}},
        {"overflow/input token count.*exceeds the maximum",
         {{"The input token count (1200000) exceeds the maximum number of tokens allowed "
           "(1048576).",
           "INPUT TOKEN COUNT EXCEEDS THE MAXIMUM"},
          {"exceeds the maximum input token count", "input tokens count (5) exceeds the maximum",
           "input token count (5) exceeds the max", "input_token_count_exceeds_the_maximum",
           // `.` does not cross a line break
           "input token count (1200000)\nexceeds the maximum"}}},
        {R"re(overflow/maximum prompt length is \d+)re",
         {{"This model's maximum prompt length is 131072 but the request contains 200000 "
           "tokens.",
           "MAXIMUM PROMPT LENGTH IS 8192"},
          {"maximum prompt length is unknown", "maximum prompt length was 131072",
           "maximum prompt length: 131072", "maximum prompt length is  131072",
           "maximum_prompt_length_is_131072"}}},
        {"overflow/reduce the length of the messages",
         {{"Please reduce the length of the messages or completion.",
           "REDUCE THE LENGTH OF THE MESSAGES"},
          {"reduce the length of the message", "reduce the number of the messages",
           "reduce the length of messages", "reduce_the_length_of_the_messages"}}},
        {R"re(overflow/maximum context length is \d+ tokens)re",
         {{"This model's maximum context length is 128000 tokens. However, you requested "
           "130000 tokens.",
           "MAXIMUM CONTEXT LENGTH IS 8192 TOKENS"},
          {"maximum context length is 128000", "maximum context length is 128k tokens",
           "maximum context length is 128000tokens", "maximum context length was 128000 tokens"}}},
        {R"re(overflow/exceeds the limit of \d+)re",
         {{"prompt token count of 130000 exceeds the limit of 128000", "EXCEEDS THE LIMIT OF 5"},
          {"exceeds the limit of the plan", "exceeded the limit of 128000",
           "exceeds the limit: 128000", "exceeds_the_limit_of_128000"}}},
        {"overflow/exceeds the available context size",
         {{"the request exceeds the available context size, try increasing it",
           "EXCEEDS THE AVAILABLE CONTEXT SIZE"},
          {"exceeds the available context", "exceeds the available memory size",
           "exceeds available context size", "exceeds_the_available_context_size"}}},
        {"overflow/greater than the context length",
         {{"The number of tokens to keep from the initial prompt is greater than the context "
           "length.",
           "GREATER THAN THE CONTEXT LENGTH"},
          {"greater than the context size", "less than the context length",
           "greater than context length", "greater_than_the_context_length"}}},
        {"overflow/context window exceeds limit",
         {{"invalid params, context window exceeds limit (2013)", "CONTEXT WINDOW EXCEEDS LIMIT"},
          {"context window exceeded limit", "context window exceeds the limit",
           "context_window exceeds limit"}}},
        {"overflow/exceeded model token limit",
         {{"Invalid request: Your request exceeded model token limit: 262144",
           "EXCEEDED MODEL TOKEN LIMIT"},
          {"exceeded the model token limit", "exceeds model token limit", "exceeded model limit",
           "exceeded_model_token_limit"}}},
        {R"re(overflow/too large for model with \d+ maximum context length)re",
         {{"Prompt contains 140000 tokens and 0 draft tokens, too large for model with 131072 "
           "maximum context length",
           "TOO LARGE FOR MODEL WITH 131072 MAXIMUM CONTEXT LENGTH"},
          {"too large for model with maximum context length",
           "too large for model with 131072 max context length",
           "too large for the model with 131072 maximum context length",
           "too large for model with unknown maximum context length",
           "too_large_for_model_with_131072_maximum_context_length"}}},
        {"overflow/model_context_window_exceeded",
         {{R"re({"error":{"code":"model_context_window_exceeded"}})re",
           "MODEL_CONTEXT_WINDOW_EXCEEDED"},
          {"model context window exceeded", "model_context_window_exceed",
           "model-context-window-exceeded"}}},
        {"overflow/prompt too long; exceeded (?:max )?context length",
         {{"prompt too long; exceeded max context length by 1200 tokens",
           "Prompt too long; exceeded context length",
           "PROMPT TOO LONG; EXCEEDED MAX CONTEXT LENGTH"},
          {"prompt too long, exceeded max context length",
           "prompt too long; exceeded maximum context length",
           "prompt too long; exceeded the context length",
           "prompt_too_long;_exceeded_max_context_length"}}},
        {"overflow/context[_ ]length[_ ]exceeded",
         {{R"re({"error":{"code":"context_length_exceeded"}})re", "Context length exceeded",
           "CONTEXT_LENGTH EXCEEDED"},
          {"context-length-exceeded", "contextlengthexceeded", "context length was exceeded",
           "context  length exceeded"}}},
        {"overflow/too many tokens",
         {{"Request has too many tokens for this model", "TOO MANY TOKENS"},
          {"too many token requests", "not many tokens", "too many_tokens",
           "too many input tokens"}}},
        {"overflow/token limit exceeded",
         {{"Token limit exceeded for this request", "TOKEN LIMIT EXCEEDED"},
          {"token limit not exceeded", "token limits exceeded", "token_limit_exceeded"}}},
        {"overflow/requested tokens?.*exceed.*context (window|length|size)",
         {{"requested tokens (140000) exceed the context window of 128000",
           "REQUESTED TOKEN COUNT EXCEEDS THE CONTEXT LENGTH",
           "requested tokens exceed context size"},
          {"requested tokens exceed the context", "requested tokens exceed the context limit",
           "context window exceeded by requested tokens",
           "requested tokens (140000) exceed\nthe context window",
           "requested tokens\n(140000) exceed the context window",
           "requested tokens exceed the context_window"}}},
        {"overflow/context (window|length|size).*(exceeded|overflow|too small)",
         {{"error: context size exceeded", "CONTEXT WINDOW OVERFLOW",
           "the context length is too small for this prompt"},
          {"context window exceeds limit", "exceeded the context window", "context limit exceeded",
           "context window\nexceeded", "context_window exceeded", "context size too_small"}}},
        {"overflow/(prompt|input).*(too long|too large).*(context|n_ctx)",
         {{"the prompt is too large for the n_ctx of this server", "INPUT TOO LONG FOR CONTEXT",
           "Input is too long for the model's context"},
          {"prompt is too long", "context: the prompt is too long",
           "input is too big for the context", "prompt is too long\nfor the context",
           "prompt\nis too long for the context", "prompt is too_long for the context"}}},
        {"overflow/request exceeds the maximum size",
         {{"Request exceeds the maximum size of 32 MB", "REQUEST EXCEEDS THE MAXIMUM SIZE"},
          {"request exceeds the maximum", "requests exceed the maximum size",
           "request exceeded the maximum size", "request_exceeds_the_maximum_size"}}},
        {"overflow/payload too large",
         {{"413 Payload Too Large", "PAYLOAD TOO LARGE", "payload too large"},
          {"payload is too large", "payload too big", "payload_too_large"}}},
        {"overflow/entity too large",
         {{"413 Request Entity Too Large", "ENTITY TOO LARGE"},
          {"entity is too large", "entities too large", "entity_too_large"}}},
        {R"re(overflow/^4(?:00|13)\s*(?:status code)?\s*\(no body\))re",
         {{"400 status code (no body)", "413 (no body)", "400 STATUS CODE (NO BODY)",
           "413status code(no body)"},
          {"error: 400 status code (no body)", " 400 status code (no body)",
           "401 status code (no body)", "400 status code no body", "4000 (no body)",
           "400 status_code (no body)", "upstream said:\n413 (no body)"}}},

        // ---- non_overflow ------------------------------------------------------------------
        {"non_overflow/^(Throttling error|Service unavailable):",
         {{"Throttling error: Too many tokens, please wait before trying again.",
           "SERVICE UNAVAILABLE: try again later", "service unavailable:"},
          {// the anchor: a leading status defeats it (today's behaviour)
           "429 Throttling error: Too many tokens, please wait before trying again.",
           "Throttling error - too many tokens", "Service unavailable",
           " Throttling error: too many tokens", "Service is unavailable: try again",
           "Throttling_error: too many tokens"}}},
        {"non_overflow/rate limit",
         {{"rate limit exceeded: too many tokens per minute", "RATE LIMIT",
           "you are being rate limited"},
          {"rate_limit_error", "ratelimit", "rate-limit", "rate of limits"}}},
        {"non_overflow/too many requests",
         {{"Too many requests: token limit exceeded", "TOO MANY REQUESTS"},
          {"too_many_requests", "too many pending requests", "too many request"}}},

        // ---- usage_limit -------------------------------------------------------------------
        {"usage_limit/usage.?limit",
         {{"You have reached your usage limit for this period", "USAGE_LIMIT", "usagelimit",
           "Usage-Limit",
           // UTF-8: `.` is one code point, so a 3-byte en dash is one character
           "usage\xE2\x80\x93"
           "limit"},
          {"usage of limits", "usage is limited", "usage  limit", "usage\nlimit"}}},
        {"usage_limit/usage_limit_reached",
         {{R"re({"error":{"type":"usage_limit_reached"}})re", "USAGE_LIMIT_REACHED"},
          {"usage limit reached", "usage_limit_reach", "usage-limit-reached"}}},
        {"usage_limit/usage_not_included",
         {{"usage_not_included: your plan does not include Codex", "USAGE_NOT_INCLUDED"},
          {"usage not included", "usage_is_not_included", "usage_not_include"}}},
        {"usage_limit/limit_reached",
         {{R"re({"error":{"code":"weekly_limit_reached"}})re", "LIMIT_REACHED"},
          {"limit reached", "limit_reach", "limits_reached", "limit-reached"}}},
        {"usage_limit/quota.?exceeded",
         {{"Quota exceeded for quota metric 'Generate Content API requests per minute'",
           "QUOTA_EXCEEDED", "quotaexceeded"},
          {"quota was exceeded", "exceeded your quota", "quota  exceeded", "quota exceed"}}},
        {"usage_limit/resource.?exhausted",
         {{"RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota).",
           "resource exhausted", "ResourceExhausted"},
          {"Resource has been exhausted", "resources exhausted", "resource exhaust"}}},
        {"usage_limit/insufficient_quota",
         {{R"re({"error":{"type":"insufficient_quota","code":"insufficient_quota"}})re",
           "INSUFFICIENT_QUOTA"},
          {"insufficient quota", "insufficient_funds", "insufficient-quota"}}},
        {"usage_limit/exceeded your current quota",
         {{"429 You exceeded your current quota, please check your plan and billing details.",
           "EXCEEDED YOUR CURRENT QUOTA"},
          {"exceeded your quota", "exceeds your current quota", "exceeded your current limit",
           "exceeded_your_current_quota"}}},

        // ---- retryable ---------------------------------------------------------------------
        {"retryable/overloaded",
         {{"Overloaded", R"re({"type":"overloaded_error"})re", "SERVER OVERLOADED"},
          {"overload", "over loaded", "overloading"}}},
        {"retryable/rate.?limit",
         {{"Rate limit reached", "rate_limit_error", "ratelimit", "RATE-LIMITED"},
          {"rate of limits", "the rating limited", "rate  limit", "rate\nlimit"}}},
        {"retryable/usage.?limit",
         {{"usage limit exceeded", "USAGE_LIMIT", "usagelimit"},
          {"usage of limits", "usage is limited", "usage  limit"}}},
        {"retryable/too many requests",
         {{"Too Many Requests", "HTTP 429 TOO MANY REQUESTS"},
          {"too_many_requests", "too many concurrent requests", "too many request"}}},
        {"retryable/429",
         {{"HTTP 429", "status=429", "(429)", "429: Too Many Requests", "code-429"},
          {"req_4291234", "4295017", "a4290", "error_429", "1429", "429ms"}}},
        {"retryable/500",
         {{"HTTP 500", "500 Internal Server Error", "code=500"},
          {"5000", "1500", "req_500", "timeout after 500ms"}}},
        {"retryable/502",
         {{"upstream said 502", "502 Bad Gateway", "status:502."},
          {"5021", "x502", "port 15020", "e502"}}},
        {"retryable/503",
         {{"status=503", "503 Service Unavailable", "[503]"},
          {"50312", "id_503", "15030", "503a"}}},
        {"retryable/504",
         {{"(504)", "504 Gateway Timeout", "504"}, {"15040", "v504a", "5040", "req_504"}}},
        {"retryable/service.?unavailable",
         {{"Service Unavailable", "SERVICE_UNAVAILABLE", "serviceunavailable"},
          {"service is unavailable", "services unavailable", "service\nunavailable"}}},
        {"retryable/server.?error",
         {{R"re({"error":{"type":"server_error"}})re", "Internal Server Error", "SERVERERROR"},
          {"server returned an error", "server side error", "servers error"}}},
        {"retryable/internal.?error",
         {{"Internal error encountered.", "INTERNAL_ERROR", "internal-error", "internalerror"},
          {"internal server error", "internal processing error", "internals error"}}},
        {"retryable/connection.?error",
         {{"Connection error.", "CONNECTION_ERROR", "connectionerror"},
          {"connection reset error", "connect error", "connections error"}}},
        {"retryable/fetch failed",
         {{"TypeError: fetch failed", "FETCH FAILED"},
          {"fetch has failed", "fetching failed", "failed to fetch", "fetch_failed"}}},
        {"retryable/retry delay",
         {{"Gemini CLI: retry delay exceeded", "RETRY DELAY"},
          {"retry-delay", "retrydelay", "retry the delay"}}},
        {"retryable/network.?error",
         {{"Network error: ECONNRESET", "NETWORK_ERROR", "networkerror"},
          {"network is down, error", "networking error", "network  error"}}},
        {"retryable/connection.?refused",
         {{"Connection refused (os error 111)", "CONNECTION_REFUSED", "connection-refused",
           "connectionrefused"},
          {"ECONNREFUSED", "connection was refused", "connections refused"}}},
        {"retryable/connection.?lost",
         {{"connection lost while streaming", "CONNECTION_LOST", "connectionlost"},
          {"connection was lost", "lost connection", "connections lost"}}},
        {"retryable/other side closed",
         {{"SocketError: other side closed", "OTHER SIDE CLOSED"},
          {"other side has closed", "the other side close", "other_side_closed"}}},
        {"retryable/upstream.?connect",
         {{"upstream connect error", "UPSTREAM_CONNECT", "upstreamconnect"},
          {"upstream failed to connect", "upstreams connect", "upstream  connect"}}},
        {"retryable/reset before headers",
         {{"disconnect/reset before headers", "RESET BEFORE HEADERS"},
          {"reset before the headers", "reset after headers", "reset_before_headers"}}},
        {"retryable/socket hang up",
         {{"Error: socket hang up", "SOCKET HANG UP"},
          {"socket hung up", "socket hangup", "socket_hang_up"}}},
        {"retryable/timed? out",
         {{"Request timed out.", "time out", "TIMED OUT"},
          {"timeout", "timed-out", "time-out", "ETIMEDOUT", "timer out"}}},
        {"retryable/timeout",
         {{"stream idle timeout after 60000 ms", "TIMEOUT", "ReadTimeout"},
          {"time out", "ETIMEDOUT", "time-out", "timed out"}}},
        {"retryable/terminated",
         {{"TypeError: terminated", "TERMINATED"}, {"terminate", "termination", "terminating"}}},
        {"retryable/ended without",
         {{"stream ended without a stop reason", "ENDED WITHOUT"},
          {"ended with", "end without", "ended early without", "ended_without"}}},
        {"retryable/stream stall",
         {{"stream stalled for 30s", "STREAM STALL"},
          {"stream is stalled", "streams stall", "stream-stall"}}},
        {"retryable/provider.?returned.?error",
         {{"Provider returned error", "provider_returned_error", "PROVIDERRETURNEDERROR"},
          {"provider returned an error", "provider has returned error",
           "provider returned  error"}}},

        // ---- hint --------------------------------------------------------------------------
        {"hint/retry-after-ms",
         {{"429 Rate limit reached for requests retry-after-ms=1000", "retry-after-ms=1500",
           "Retry-After-Ms: 30", "RETRY-AFTER-MS = 1000"},
          {"retry-after-ms=abc", "retry after ms 1500", "retry-after-ms 1500",
           "retry_after_ms=1500", "retry-after-ms: -5"}}},
        {"hint/retry-after seconds",
         {{"Retry-After: 30", "retry-after=1.5", "RETRY-AFTER : 120"},
          {"retry-after: Wed, 21 Oct 2026 07:28:00 GMT", "retry-after-ms=1500", "retry after: 30",
           "retry-after: soon", "retry_after=30", "retry-after 30"}}},
        {"hint/retry-after http-date",
         {{"retry-after: Wed, 21 Oct 2026 07:28:00 GMT",
           "Retry-After: Wed, 21 Oct 2026 07:28:00 GMT",
           "retry-after=Sun, 1 Nov 2026 00:00:00 gmt"},
          {"retry-after: Wed, 21 Oct 2026 07:28:00 UTC",
           "retry-after: Wednesday, 21 Oct 2026 07:28:00 GMT",
           "retry-after: Wed 21 Oct 2026 07:28:00 GMT", "Date: Wed, 21 Oct 2026 07:28:00 GMT",
           "retry-after: Wed, 21 Oct 26 07:28:00 GMT", "retry-after: Wed, 21 Oct 2026 7:28:00 GMT",
           "retry-after: Wed, 121 Oct 2026 07:28:00 GMT",
           "retry-after Wed, 21 Oct 2026 07:28:00 GMT",
           "retry-after: Wed,21-Oct-2026 07:28:00 GMT"}}},
        {"hint/x-ratelimit-reset-ms",
         {{"x-ratelimit-reset-ms: 1500", "X-RateLimit-Reset-Ms=1755772800000"},
          {"x-ratelimit-reset: 1500", "x-ratelimit-reset-ms: soon", "ratelimit-reset-ms: 1500",
           "x-ratelimit-reset-ms 1500", "x_ratelimit_reset_ms: 1500"}}},
        {"hint/x-ratelimit-reset",
         {{"x-ratelimit-reset: 20", "X-RateLimit-Reset=1755772800"},
          {"x-ratelimit-reset-ms: 1500", "x-ratelimit-reset-requests: 1s",
           "x-ratelimit-remaining: 20", "x-ratelimit-reset: soon", "x-ratelimit-reset 20",
           "x_ratelimit_reset: 20"}}},
        {"hint/try again in N unit",
         {{"Please try again in 1.898s.", "retry after 33 seconds", "RETRY IN 500ms",
           "try again after 2 sec", "Please retry in 41.8s", "retry after 1 second",
           "try again in 2 secs"},
          {"try again in 5 minutes", "retry-after: 30s", "try again in 2h", "retry in 10 msgs",
           "try again in a few seconds", "try again 5s", "try again in five seconds",
           "try again in 1.5 minutes", "retry in .5s", "retry in 5m"}}},
        {"hint/try again in duration",
         {{"try again in 2h 3m", "Try again in 1 day 4 hours 5 minutes", "TRY AGAIN IN 30 SECONDS",
           "try again in 45s", "try again in 3d 4h", "try again in 1 hour",
           "Try again in 1 minute 30 seconds", "try again in 1 second", "try again in 2 days"},
          {"try again in 500ms", "try again in a few minutes", "try again later",
           "try again in 1.5h", "retry in 2h", "try again in 2hrs", "try again in minutes"}}},
        {"hint/limit reached|epoch",
         {{"Claude AI usage limit reached|1755772800", "LIMIT REACHED|123456789",
           "limit reached|17557728001"},
          {"limit reached|12345678", "limit reached|123456789012", "limit reached 1755772800",
           "limit_reached|1755772800", "limit reached|"}}},
        {"hint/resets at iso8601",
         {{"resets at 2026-11-29T18:00:00Z", "Resets at 2026-11-29T18:00+01:00",
           "RESET AT 2026-11-29t18:00:00.123-0500"},
          {"resets at 2026-11-29 18:00:00Z", "resets at 2026-11-29T18:00:00",
           "resets 2026-11-29T18:00:00Z", "resets at tomorrow 18:00", "resets at 2026-11-29",
           "resets at 26-11-29T18:00:00Z", "resets at 2026-11-29T18:00:00.123 (UTC+01:00)"}}},
    };
    return m;
}

}  // namespace

TEST_CASE("every pattern entry has must-match and must-not-match texts", "[classify][table]") {
    const auto& m = pattern_cases();
    const auto table = pattern_table();
    std::set<std::string> rules;
    for (const auto& e : table) {
        const std::string rule = rule_of(e);
        INFO(rule);
        CHECK(rules.insert(rule).second);  // a rule string names one entry
        const auto it = m.find(rule);
        if (it == m.end()) {
            FAIL_CHECK("no must-match / must-not-match row for " << rule);
            continue;
        }
        CHECK(it->second.match.size() >= 2);
        CHECK(it->second.no_match.size() >= 2);
    }
    for (const auto& [rule, c] : m) {
        if (rules.count(rule) == 0) FAIL_CHECK("row " << rule << " names no table entry");
    }
    CHECK(m.size() == table.size());
}

TEST_CASE("each pattern entry matches its must-match texts and none of its must-not texts",
          "[classify][table]") {
    const auto& m = pattern_cases();
    const auto table = pattern_table();
    for (std::size_t i = 0; i < table.size(); ++i) {
        const std::string rule = rule_of(table[i]);
        const auto it = m.find(rule);
        if (it == m.end()) continue;  // reported by the test case above
        for (const auto t : it->second.match) {
            INFO(rule << ": " << t);
            CHECK(pattern_matches(i, t));
        }
        for (const auto t : it->second.no_match) {
            INFO(rule << ": " << t);
            CHECK_FALSE(pattern_matches(i, t));
        }
    }
}

}  // namespace coagent
