#pragma once
// Backoff policy (spec §4): baseDelayMs * 2^(attempt-1), saturating instead of overflowing.

#include <coagent/runtime/settings.hpp>

#include <chrono>
#include <cstdint>
#include <limits>

namespace coagent {

/// baseDelayMs * 2^(attempt-1) for attempt >= 1, saturated at INT64_MAX ms; 0 for attempt < 1
/// or a non-positive base.
constexpr std::int64_t backoff_delay(const retry_settings& s, int attempt) noexcept {
    if (attempt < 1 || s.base_delay_ms <= 0) return 0;
    constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
    std::int64_t d = s.base_delay_ms;
    for (int i = 1; i < attempt; ++i) {
        if (d > max / 2) return max;
        d *= 2;
    }
    return d;
}

/// A ms delay as nanoseconds for a timer, saturated so it never overflows a time point.
constexpr std::chrono::nanoseconds delay_to_duration(std::int64_t ms) noexcept {
    // ~100 years is "forever" for a backoff and leaves headroom for now() + d.
    constexpr std::int64_t cap_ms = std::int64_t{100} * 365 * 24 * 3600 * 1000;
    if (ms <= 0) return std::chrono::nanoseconds::zero();
    if (ms > cap_ms) ms = cap_ms;
    return std::chrono::milliseconds(ms);
}

}  // namespace coagent
