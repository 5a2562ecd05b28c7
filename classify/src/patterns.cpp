// The pattern table of policy Appendix A: the one place where classification patterns live.
// Change an entry → bump pattern_table_version (patterns.hpp) and keep its example matching.
//
// Order matters inside a table: the first entry that matches names the decision
// ("<table>/<name>"). Tables are consulted in the order overflow (unless non_overflow
// matches) → usage_limit → status → retryable; hints are tried in their own order.

#include <coagent/classify/patterns.hpp>

#include <array>

namespace coagent {
namespace {

using hf = hint_form;
using lk = limit_kind;

constexpr std::array table{
    // ---- context overflow: wins over every retryable pattern (→ compaction path) ----------
    pattern_entry{"overflow", "prompt is too long", R"re(prompt is too long)re", "Anthropic",
                  "400 prompt is too long: 213462 tokens > 200000 maximum"},
    pattern_entry{"overflow", "request_too_large", R"re(request_too_large)re", "Anthropic (413)",
                  "request_too_large: Request exceeds the maximum size"},
    pattern_entry{"overflow", "input is too long for requested model",
                  R"re(input is too long for requested model)re", "Amazon Bedrock",
                  "ValidationException: Input is too long for requested model."},
    pattern_entry{"overflow", "exceeds the context window", R"re(exceeds the context window)re",
                  "OpenAI", "Your input exceeds the context window of this model"},
    pattern_entry{"overflow", "input token count.*exceeds the maximum",
                  R"re(input token count.*exceeds the maximum)re", "Google Gemini",
                  "The input token count (1200000) exceeds the maximum number of tokens allowed "
                  "(1048576)."},
    pattern_entry{"overflow", R"re(maximum prompt length is \d+)re",
                  R"re(maximum prompt length is \d+)re", "xAI",
                  "This model's maximum prompt length is 131072 but the request contains 200000 "
                  "tokens."},
    pattern_entry{"overflow", "reduce the length of the messages",
                  R"re(reduce the length of the messages)re", "Groq",
                  "Please reduce the length of the messages or completion."},
    pattern_entry{"overflow", R"re(maximum context length is \d+ tokens)re",
                  R"re(maximum context length is \d+ tokens)re", "OpenRouter / OpenAI",
                  "This model's maximum context length is 128000 tokens. However, you requested "
                  "130000 tokens."},
    pattern_entry{"overflow", R"re(exceeds the limit of \d+)re", R"re(exceeds the limit of \d+)re",
                  "GitHub Copilot", "prompt token count of 130000 exceeds the limit of 128000"},
    pattern_entry{"overflow", "exceeds the available context size",
                  R"re(exceeds the available context size)re", "llama.cpp",
                  "the request exceeds the available context size, try increasing it"},
    pattern_entry{"overflow", "greater than the context length",
                  R"re(greater than the context length)re", "LM Studio",
                  "The number of tokens to keep from the initial prompt is greater than the "
                  "context length."},
    pattern_entry{"overflow", "context window exceeds limit", R"re(context window exceeds limit)re",
                  "MiniMax", "invalid params, context window exceeds limit (2013)"},
    pattern_entry{"overflow", "exceeded model token limit", R"re(exceeded model token limit)re",
                  "Kimi (Moonshot)",
                  "Invalid request: Your request exceeded model token limit: 262144"},
    pattern_entry{"overflow", R"re(too large for model with \d+ maximum context length)re",
                  R"re(too large for model with \d+ maximum context length)re", "Mistral",
                  "Prompt contains 140000 tokens and 0 draft tokens, too large for model with "
                  "131072 maximum context length"},
    pattern_entry{"overflow", "model_context_window_exceeded",
                  R"re(model_context_window_exceeded)re", "z.ai",
                  R"re({"error":{"code":"model_context_window_exceeded"}})re"},
    pattern_entry{"overflow", "prompt too long; exceeded (?:max )?context length",
                  R"re(prompt too long; exceeded (?:max )?context length)re", "Ollama",
                  "prompt too long; exceeded max context length by 1200 tokens"},
    pattern_entry{"overflow", "context[_ ]length[_ ]exceeded",
                  R"re(context[_ ]length[_ ]exceeded)re", "generic (pi-ai overflow.ts)",
                  R"re({"error":{"code":"context_length_exceeded"}})re"},
    pattern_entry{"overflow", "too many tokens", R"re(too many tokens)re",
                  "generic (pi-ai overflow.ts)", "Request has too many tokens for this model"},
    pattern_entry{"overflow", "token limit exceeded", R"re(token limit exceeded)re",
                  "generic (pi-ai overflow.ts)", "Token limit exceeded for this request"},
    pattern_entry{"overflow", "requested tokens?.*exceed.*context (window|length|size)",
                  R"re(requested tokens?.*exceed.*context (window|length|size))re",
                  "generic (omp overflow.ts)",
                  "requested tokens (140000) exceed the context window of 128000"},
    pattern_entry{"overflow", "context (window|length|size).*(exceeded|overflow|too small)",
                  R"re(context (window|length|size).*(exceeded|overflow|too small))re",
                  "generic (omp overflow.ts)", "error: context size exceeded"},
    pattern_entry{"overflow", "(prompt|input).*(too long|too large).*(context|n_ctx)",
                  R"re((prompt|input).*(too long|too large).*(context|n_ctx))re",
                  "generic (omp overflow.ts; llama.cpp n_ctx)",
                  "the prompt is too large for the n_ctx of this server"},
    pattern_entry{"overflow", "request exceeds the maximum size",
                  R"re(request exceeds the maximum size)re", "generic (omp overflow.ts)",
                  "Request exceeds the maximum size of 32 MB"},
    pattern_entry{"overflow", "payload too large", R"re(payload too large)re", "generic (HTTP 413)",
                  "413 Payload Too Large"},
    pattern_entry{"overflow", "entity too large", R"re(entity too large)re", "generic (HTTP 413)",
                  "413 Request Entity Too Large"},
    pattern_entry{"overflow", R"re(^4(?:00|13)\s*(?:status code)?\s*\(no body\))re",
                  R"re(^4(?:00|13)\s*(?:status code)?\s*\(no body\))re", "Cerebras / Mistral",
                  "400 status code (no body)"},

    // ---- non-overflow exclusions: an overflow match is ignored when one of these matches ---
    pattern_entry{"non_overflow", "^(Throttling error|Service unavailable):",
                  R"re(^(Throttling error|Service unavailable):)re", "Amazon Bedrock",
                  "Throttling error: Too many tokens, please wait before trying again."},
    pattern_entry{"non_overflow", "rate limit", R"re(rate limit)re", "generic (pi-ai overflow.ts)",
                  "rate limit exceeded: too many tokens per minute"},
    pattern_entry{"non_overflow", "too many requests", R"re(too many requests)re",
                  "generic (pi-ai overflow.ts)", "Too many requests: token limit exceeded"},

    // ---- usage limit: a retryable subclass that goes through the auth storage (policy §3.7) --
    pattern_entry{"usage_limit", "usage.?limit", R"re(usage.?limit)re",
                  "subscription plans (Claude, ChatGPT/Codex)",
                  "You have reached your usage limit for this period", lk::quota},
    pattern_entry{"usage_limit", "usage_limit_reached", R"re(usage_limit_reached)re",
                  "OpenAI Codex (ChatGPT plan)", R"re({"error":{"type":"usage_limit_reached"}})re",
                  lk::quota},
    pattern_entry{"usage_limit", "usage_not_included", R"re(usage_not_included)re",
                  "OpenAI Codex (ChatGPT plan)",
                  "usage_not_included: your plan does not include Codex", lk::quota},
    pattern_entry{"usage_limit", "limit_reached", R"re(limit_reached)re",
                  "generic (omp rate-limit-utils)",
                  R"re({"error":{"code":"weekly_limit_reached"}})re", lk::quota},
    pattern_entry{"usage_limit", "quota.?exceeded", R"re(quota.?exceeded)re", "Google / OpenAI",
                  "Quota exceeded for quota metric 'Generate Content API requests per minute'",
                  lk::quota},
    pattern_entry{"usage_limit", "resource.?exhausted", R"re(resource.?exhausted)re",
                  "Google Gemini / Vertex (RESOURCE_EXHAUSTED)",
                  "RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota).", lk::rate},
    // beyond Appendix A (table 2026.11.2): the OpenAI API's out-of-credit 429 is a usage
    // limit, not a rate limit — retrying the same key cannot help, switching keys can
    pattern_entry{"usage_limit", "insufficient_quota", R"re(insufficient_quota)re", "OpenAI API",
                  R"re({"error":{"type":"insufficient_quota","code":"insufficient_quota"}})re",
                  lk::billing},
    pattern_entry{
        "usage_limit", "exceeded your current quota", R"re(exceeded your current quota)re",
        "OpenAI API",
        "429 You exceeded your current quota, please check your plan and billing details.",
        lk::billing},

    // ---- retryable: the specification's list (§2), spelled as the reference spells it ------
    pattern_entry{"retryable", "overloaded", R"re(overloaded)re",
                  "policy §2 (Anthropic overloaded_error)", "Overloaded", lk::capacity},
    pattern_entry{"retryable", "rate.?limit", R"re(rate.?limit)re", "policy §2",
                  "Rate limit exceeded", lk::rate},
    pattern_entry{"retryable", "usage.?limit", R"re(usage.?limit)re", "policy §2",
                  "usage limit exceeded", lk::quota},
    pattern_entry{"retryable", "too many requests", R"re(too many requests)re", "policy §2",
                  "Too Many Requests", lk::rate},
    pattern_entry{"retryable", "429", R"re(\b429\b)re", "policy §2 (whole token)", "HTTP 429",
                  lk::rate},
    pattern_entry{"retryable", "500", R"re(\b500\b)re", "policy §2 (whole token)", "HTTP 500",
                  lk::server},
    pattern_entry{"retryable", "502", R"re(\b502\b)re", "policy §2 (whole token)",
                  "upstream said 502", lk::server},
    pattern_entry{"retryable", "503", R"re(\b503\b)re", "policy §2 (whole token)", "status=503",
                  lk::capacity},
    pattern_entry{"retryable", "504", R"re(\b504\b)re", "policy §2 (whole token)", "(504)",
                  lk::server},
    pattern_entry{"retryable", "service.?unavailable", R"re(service.?unavailable)re", "policy §2",
                  "Service Unavailable", lk::capacity},
    pattern_entry{"retryable", "server.?error", R"re(server.?error)re", "policy §2",
                  R"re({"error":{"type":"server_error"}})re", lk::server},
    pattern_entry{"retryable", "internal.?error", R"re(internal.?error)re", "policy §2",
                  "Internal error encountered.", lk::server},
    pattern_entry{"retryable", "connection.?error", R"re(connection.?error)re", "policy §2",
                  "Connection error.", lk::transport},
    pattern_entry{"retryable", "fetch failed", R"re(fetch failed)re", "policy §2 (Node.js fetch)",
                  "TypeError: fetch failed", lk::transport},
    pattern_entry{"retryable", "retry delay", R"re(retry delay)re", "policy §2 (Gemini CLI)",
                  "Gemini CLI: retry delay exceeded", lk::rate},
    // later reference versions: transport phrases users meet daily
    pattern_entry{"retryable", "network.?error", R"re(network.?error)re", "transport",
                  "Network error: ECONNRESET", lk::transport},
    pattern_entry{"retryable", "connection.?refused", R"re(connection.?refused)re", "transport",
                  "Connection refused (os error 111)", lk::transport},
    pattern_entry{"retryable", "connection.?lost", R"re(connection.?lost)re", "transport",
                  "connection lost while streaming", lk::transport},
    pattern_entry{"retryable", "other side closed", R"re(other side closed)re",
                  "transport (Node.js undici)", "SocketError: other side closed", lk::transport},
    pattern_entry{"retryable", "upstream.?connect", R"re(upstream.?connect)re",
                  "transport (Envoy proxy)", "upstream connect error", lk::transport},
    pattern_entry{"retryable", "reset before headers", R"re(reset before headers)re",
                  "transport (Envoy proxy)", "disconnect/reset before headers", lk::transport},
    pattern_entry{"retryable", "socket hang up", R"re(socket hang up)re",
                  "transport (Node.js http)", "Error: socket hang up", lk::transport},
    pattern_entry{"retryable", "timed? out", R"re(timed? out)re", "transport", "Request timed out.",
                  lk::transport},
    pattern_entry{"retryable", "timeout", R"re(timeout)re", "transport (stream idle timeout)",
                  "stream idle timeout after 60000 ms", lk::transport},
    pattern_entry{"retryable", "terminated", R"re(terminated)re", "transport (Node.js undici)",
                  "TypeError: terminated", lk::transport},
    pattern_entry{"retryable", "ended without", R"re(ended without)re", "transport",
                  "stream ended without a stop reason", lk::transport},
    pattern_entry{"retryable", "stream stall", R"re(stream stall)re", "transport",
                  "stream stalled for 30s", lk::transport},
    pattern_entry{"retryable", "provider.?returned.?error", R"re(provider.?returned.?error)re",
                  "OpenRouter", "Provider returned error", lk::server},

    // ---- retry hints, first match wins (parse_retry_hint) --------------------------------
    pattern_entry{"hint", "retry-after-ms", R"re(retry-after-ms\s*[:=]\s*(\d+))re",
                  "HTTP provider suffix / retry-after-ms header",
                  "429 Rate limit reached for requests retry-after-ms=1000", lk::none,
                  hf::milliseconds},
    pattern_entry{"hint", "retry-after seconds", R"re(retry-after\s*[:=]\s*(\d+(?:\.\d+)?))re",
                  "HTTP Retry-After header (delay-seconds)", "retry-after: 30", lk::none,
                  hf::seconds},
    pattern_entry{
        "hint", "retry-after http-date",
        R"re(retry-after\s*[:=]\s*([A-Za-z]{3}, \d{1,2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT))re",
        "HTTP Retry-After header (IMF-fixdate)", "retry-after: Wed, 21 Oct 2026 07:28:00 GMT",
        lk::none, hf::http_date},
    pattern_entry{"hint", "x-ratelimit-reset-ms", R"re(x-ratelimit-reset-ms\s*[:=]\s*(\d+))re",
                  "x-ratelimit-reset-ms header", "x-ratelimit-reset-ms: 1500", lk::none,
                  hf::reset_ms},
    pattern_entry{"hint", "x-ratelimit-reset", R"re(x-ratelimit-reset\s*[:=]\s*(\d+))re",
                  "x-ratelimit-reset header", "x-ratelimit-reset: 20", lk::none, hf::reset_seconds},
    pattern_entry{
        "hint", "try again in N unit",
        R"re((?:try again|retry)\s+(?:after|in)\s+(\d+(?:\.\d+)?)\s*(ms|s|secs?|seconds?)\b)re",
        "OpenAI / Gemini / Azure OpenAI error texts", "Please try again in 1.898s.", lk::none,
        hf::number_with_unit},
    pattern_entry{
        "hint", "try again in duration",
        R"re(try again in\s+((?:\d+\s*(?:days?|d|hours?|h|minutes?|m|seconds?|s)\b\s*)+))re",
        "ChatGPT / Codex usage limit", "try again in 2h 3m", lk::none, hf::duration_sum},
    pattern_entry{"hint", "limit reached|epoch", R"re(limit reached\|(\d{9,11})\b)re",
                  "Claude subscription usage limit", "Claude AI usage limit reached|1755772800",
                  lk::none, hf::epoch_seconds},
    pattern_entry{
        "hint", "resets at iso8601",
        R"re(resets? at\s+(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})))re",
        "usage-limit reset times (Anthropic / Codex)", "resets at 2026-11-29T18:00:00Z", lk::none,
        hf::iso8601},
};

constexpr std::array statuses{
    status_entry{408, "HTTP 408 Request Timeout", lk::transport},
    status_entry{429, "HTTP 429 Too Many Requests", lk::rate},
    status_entry{500, "HTTP 500 Internal Server Error", lk::server},
    status_entry{502, "HTTP 502 Bad Gateway", lk::server},
    status_entry{503, "HTTP 503 Service Unavailable", lk::capacity},
    status_entry{504, "HTTP 504 Gateway Timeout", lk::server},
    status_entry{529, "HTTP 529 Overloaded (Anthropic)", lk::capacity},
};

// Tables must stay grouped, in the order the classifier and the docs describe.
consteval bool grouped_in_order() {
    constexpr std::array<std::string_view, 5> order{"overflow", "non_overflow", "usage_limit",
                                                    "retryable", "hint"};
    std::size_t t = 0;
    for (const auto& e : table) {
        while (t < order.size() && e.table != order[t]) ++t;
        if (t == order.size()) return false;
        if (e.name.empty() || e.regex.empty() || e.source.empty() || e.example.empty())
            return false;
        if ((e.table == "hint") != (e.form != hint_form::none)) return false;
        // every decision that retries says what kind of limit it is; the others say none
        const bool retries = e.table == "usage_limit" || e.table == "retryable";
        if (retries != (e.limit != limit_kind::none)) return false;
    }
    return true;
}
static_assert(grouped_in_order(), "pattern table: tables out of order or an entry is incomplete");

consteval bool statuses_have_limits() {
    for (const auto& s : statuses)
        if (s.limit == limit_kind::none) return false;
    return true;
}
static_assert(statuses_have_limits(), "pattern table: a retryable status without a limit");

}  // namespace

std::span<const pattern_entry> pattern_table() noexcept {
    return table;
}
std::span<const status_entry> retryable_statuses() noexcept {
    return statuses;
}

}  // namespace coagent
