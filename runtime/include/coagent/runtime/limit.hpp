#pragma once
// The kind of limit a retryable refusal is (docs/classification.md "Typed limits"): a
// per-minute rate limit heals in seconds, a quota window at its reset, a billing problem never
// by waiting, an overloaded provider, a failing server or a dropped connection on their own
// schedule. Carried by classify()'s decision and by auto_retry_start as `limit`.

#include <string_view>

namespace coagent {

enum class limit_kind : unsigned char {
    none,       ///< not retryable, or a context overflow
    rate,       ///< per-minute requests or tokens: too many requests, rate limit, throttling
    quota,      ///< a usage window with a reset: usage limit reached, resets at …
    billing,    ///< out of credit: insufficient_quota, exceeded your current quota
    capacity,   ///< the provider is overloaded or unavailable: overloaded, 503, 529
    server,     ///< the provider failed: 500, 502, 504, internal / server error
    transport,  ///< the connection failed: refused, lost, reset, timed out, stream stall
};

constexpr std::string_view to_string(limit_kind k) noexcept {
    switch (k) {
        case limit_kind::rate:
            return "rate";
        case limit_kind::quota:
            return "quota";
        case limit_kind::billing:
            return "billing";
        case limit_kind::capacity:
            return "capacity";
        case limit_kind::server:
            return "server";
        case limit_kind::transport:
            return "transport";
        case limit_kind::none:
            break;
    }
    return "none";
}

}  // namespace coagent
