#pragma once
// Backoff policy (policy §4): baseDelayMs * 2^(attempt-1), saturating instead of overflowing; and
// the opt-in refinements beyond the spec (jitter, server hints as a floor, a maximum wait).

#include <coagent/runtime/settings.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>

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

/// The wait before retry `attempt` under the additions beyond the spec (all off by default, so
/// the default is exactly backoff_delay):
///  - retry.jitter: `full` draws the backoff from [0, backoff], `equal` from
///    [backoff/2, backoff]; `uniform01` in [0, 1) is the random draw (injected: tests pass a
///    fixed value);
///  - retry.honorRetryAfter: the server's hint is a floor: max(backoff, hint);
///  - retry.maxDelayMs (> 0): a backoff above it is capped at it; an honoured hint above it
///    makes `over_max` true — the chain ends at once (the server asked for longer than the user
///    accepts to wait).
struct retry_wait {
    std::int64_t delay_ms = 0;
    bool over_max = false;
    std::int64_t asked_ms = 0;  ///< the honoured hint that exceeded retry.maxDelayMs
};

constexpr retry_wait compute_retry_wait(const retry_settings& s, int attempt,
                                        std::optional<std::int64_t> hint_ms,
                                        double uniform01) noexcept {
    std::int64_t backoff = backoff_delay(s, attempt);
    if (s.jitter != retry_jitter::none && backoff > 0) {
        const double u = uniform01 < 0 ? 0 : (uniform01 >= 1 ? 0.9999999999999999 : uniform01);
        const std::int64_t lo = s.jitter == retry_jitter::equal ? backoff / 2 : 0;
        const double span = static_cast<double>(backoff - lo);
        double x = span * u + 0.5;  // rounded to whole ms
        if (x > span) x = span;
        if (x > 9.0e18) x = 9.0e18;  // a saturated backoff stays representable
        backoff = lo + static_cast<std::int64_t>(x);
    }
    if (s.max_delay_ms > 0 && backoff > s.max_delay_ms) backoff = s.max_delay_ms;
    retry_wait w{backoff, false, 0};
    if (s.honor_retry_after && hint_ms && *hint_ms > 0) {
        if (s.max_delay_ms > 0 && *hint_ms > s.max_delay_ms) {
            w.over_max = true;
            w.asked_ms = *hint_ms;
        }
        if (*hint_ms > w.delay_ms) w.delay_ms = *hint_ms;
    }
    return w;
}

/// retry.longWait "park" (docs/retry-policy.md §11.26): how long after the park's `until` the
/// session wakes, so that the sessions of one account do not all wake together: `uniform01` in
/// [0, 1) of min(10 % of the park's wait, 60 s), rounded down to whole ms.
constexpr std::int64_t park_spread_ms(std::int64_t wait_ms, double uniform01) noexcept {
    if (wait_ms <= 0) return 0;
    std::int64_t span = wait_ms / 10;
    if (span > 60'000) span = 60'000;
    const double u = uniform01 < 0 ? 0 : (uniform01 >= 1 ? 0.9999999999999999 : uniform01);
    return static_cast<std::int64_t>(static_cast<double>(span) * u);
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
