#pragma once
// Settings as plain structs; the defaults here are the schema's defaults (spec §4, design.md).
// Loading, layering and validation live in session/settings_loader.

#include <cstdint>

namespace coagent {

struct retry_settings {
    bool enabled = true;             // retry.enabled
    int max_retries = 3;             // retry.maxRetries
    std::int64_t base_delay_ms = 2000;  // retry.baseDelayMs
};

struct compaction_settings {
    bool enabled = true;                    // compaction.enabled
    std::int64_t reserve_tokens = 16384;    // compaction.reserveTokens
    std::int64_t keep_recent_tokens = 20000;  // compaction.keepRecentTokens
};

struct provider_settings {
    std::int64_t connect_timeout_ms = 10000;       // provider.connectTimeoutMs
    std::int64_t stream_idle_timeout_ms = 120000;  // provider.streamIdleTimeoutMs
};

struct settings {
    retry_settings retry;
    compaction_settings compaction;
    provider_settings provider;
};

}  // namespace coagent
