#pragma once
// Settings as plain structs; the defaults here are the schema's defaults (policy §4,
// docs/settings.md). Loading, layering and validation live in session/settings_loader.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace coagent {

/// retry.jitter: how a computed backoff is randomised (none keeps the spec's exact delays).
enum class retry_jitter { none, full, equal };

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

/// The model used when the command line names none (docs/settings.md "Choosing the model").
struct model_selection_settings {
    std::string default_provider;  // defaultProvider (empty: the first provider with a key)
    std::string default_model;     // defaultModel (empty: that provider's first model)
};

struct tui_settings {
    bool markdown = true;  // tui.markdown: assistant replies rendered as Markdown
};

struct telemetry_settings {
    std::string trace_file;  // telemetry.traceFile: span records as JSON lines ("" = none)
};

struct settings {
    retry_settings retry;
    compaction_settings compaction;
    provider_settings provider;
    telemetry_settings telemetry;
    model_selection_settings selection;
    tui_settings tui;
};

}  // namespace coagent
