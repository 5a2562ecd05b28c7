#pragma once
// Settings as plain structs; the defaults here are the schema's defaults (policy §4,
// docs/settings.md). Loading, layering and validation live in session/settings_loader.

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent {

/// retry.jitter: how a computed backoff is randomised (none keeps the spec's exact delays).
enum class retry_jitter { none, full, equal };

/// retry.longWait: what a wait above retry.maxDelayMs does (docs/retry-policy.md §11.24): `fail`
/// ends the chain (the default: today's behaviour), `fallback` moves to the next model of
/// retry.fallbackChains (else fails), `park` parks the prompt until the limit's reset,
/// `fallback_park` falls back first and parks when no model is left.
enum class long_wait_policy { fail, fallback, park, fallback_park };

constexpr bool long_wait_falls_back(long_wait_policy p) noexcept {
    return p == long_wait_policy::fallback || p == long_wait_policy::fallback_park;
}
constexpr bool long_wait_parks(long_wait_policy p) noexcept {
    return p == long_wait_policy::park || p == long_wait_policy::fallback_park;
}

/// retry.fallbackRevertPolicy: when a model put aside by a usage limit comes back.
enum class fallback_revert_policy { cooldown_expiry, never };

/// retry.fallbackChains: role → model selectors ("provider/model"), in settings-file order.
using fallback_chains = std::vector<std::pair<std::string, std::vector<std::string>>>;

// (members ordered so that the flags share one word: every session holds a copy)
struct retry_settings {
    bool enabled = true;  // retry.enabled
    // Beyond the spec (docs/retry-policy.md, chain endings), all off by default:
    bool honor_retry_after = false;  // retry.honorRetryAfter: delay = max(backoff, server hint)
    // retry.honorShouldRetry: `x-should-retry: false` stops the chain
    bool honor_should_retry = false;
    // retry.resumePartial: a retry after a text-only partial reply continues it (Anthropic
    // Messages prefill) instead of regenerating it
    bool resume_partial = false;
    int max_retries = 3;                // retry.maxRetries
    std::int64_t base_delay_ms = 2000;  // retry.baseDelayMs
    std::int64_t max_delay_ms =
        0;  // retry.maxDelayMs: a longer computed wait ends the chain (0 = off)
    retry_jitter jitter = retry_jitter::none;  // retry.jitter: none | full | equal
    // retry.fallbackRevertPolicy
    fallback_revert_policy fallback_revert = fallback_revert_policy::cooldown_expiry;
    // retry.longWait: engages only with retry.maxDelayMs > 0
    long_wait_policy long_wait = long_wait_policy::fail;
    // Model fallback on the usage-limit path (docs/settings.md; empty = off). Shared and immutable
    // so a settings copy per session stays small.
    std::shared_ptr<const fallback_chains> fallback;  // retry.fallbackChains
};

struct compaction_settings {
    bool enabled = true;                      // compaction.enabled
    std::int64_t reserve_tokens = 16384;      // compaction.reserveTokens
    std::int64_t keep_recent_tokens = 20000;  // compaction.keepRecentTokens
};

struct provider_settings {
    std::int64_t connect_timeout_ms = 10000;       // provider.connectTimeoutMs
    std::int64_t stream_idle_timeout_ms = 120000;  // provider.streamIdleTimeoutMs
    std::int64_t attempt_timeout_ms = 600000;      // provider.attemptTimeoutMs (0 = off)
};

/// retry.budget: gRPC's retry throttling (gRFC A6), per provider. The bucket starts full; an
/// attempt that fails with a retryable error takes 1 token, a successful attempt adds tokenRatio
/// (never above maxTokens); a retry is allowed only while tokens > maxTokens / 2. Off by default.
/// Token counts are kept in thousandths (A6: three decimal places).
struct retry_budget_settings {
    std::int32_t max_tokens = 10;          // retry.budget.maxTokens: 1 … 1000
    std::int32_t token_ratio_milli = 100;  // retry.budget.tokenRatio (0.1), in thousandths
    bool enabled = false;                  // retry.budget.enabled
};

/// limits.store: where the limit state lives (docs/limits.md).
enum class limit_store_kind { local, redis };

/// The `limits` group: read by the program that builds the process's limit_store, not by a
/// session (so a session's settings copy holds only a pointer; null = these defaults).
struct limits_settings {
    limit_store_kind store = limit_store_kind::local;    // limits.store
    std::string redis_url = "redis://127.0.0.1:6379/0";  // limits.redisUrl ($COAGENT_REDIS_URL)
    std::string key_prefix = "coagent:";                 // limits.keyPrefix
};

/// thinkingLevel: how much a reasoning model thinks (the reference's levels, in cycle order).
enum class thinking_level : std::uint8_t { off, minimal, low, medium, high, xhigh };
inline constexpr std::string_view thinking_level_names[] = {"off",    "minimal", "low",
                                                            "medium", "high",    "xhigh"};
constexpr std::string_view to_string(thinking_level l) noexcept {
    return thinking_level_names[static_cast<std::size_t>(l)];
}
constexpr std::optional<thinking_level> thinking_level_from_string(std::string_view s) noexcept {
    for (std::size_t i = 0; i < std::size(thinking_level_names); ++i)
        if (thinking_level_names[i] == s) return static_cast<thinking_level>(i);
    return std::nullopt;
}

/// The model used when the command line names none (docs/settings.md "Choosing the model"),
/// and how much it thinks.
struct model_selection_settings {
    std::string default_provider;  // defaultProvider (empty: the first provider with a key)
    std::string default_model;     // defaultModel (empty: that provider's first model)
    thinking_level thinking = thinking_level::off;  // thinkingLevel
};

struct tui_settings {
    bool markdown = true;          // tui.markdown: assistant replies rendered as Markdown
    bool expand_thinking = false;  // tui.expandThinking: thinking blocks whole (Ctrl+T saves it)
};

struct telemetry_settings {
    std::string trace_file;  // telemetry.traceFile: span records as JSON lines ("" = none)
};

struct settings {
    retry_settings retry;
    compaction_settings compaction;
    provider_settings provider;
    retry_budget_settings budget;                   // retry.budget.*
    std::shared_ptr<const limits_settings> limits;  // limits.* (null: the defaults)
    telemetry_settings telemetry;
    model_selection_settings selection;
    tui_settings tui;

    /// limits.*, with the defaults when none was set.
    const limits_settings& limits_or_default() const {
        static const limits_settings defaults;
        return limits ? *limits : defaults;
    }
};

}  // namespace coagent
