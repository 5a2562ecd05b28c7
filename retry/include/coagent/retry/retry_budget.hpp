#pragma once
// retry_budget: gRPC's retry throttling (gRFC A6) as plain code, one token bucket. The limit
// stores (session/limit_store.hpp) keep one per provider; the run policy asks them.
//
// A6 exactly: the bucket starts full (maxTokens); an attempt that fails with a retryable error
// takes 1 token (never below 0), a successful attempt adds tokenRatio (never above maxTokens); a
// retry is allowed only while tokens > maxTokens / 2, checked after the failure's withdrawal.
// Tokens are counted in thousandths, so 0.1 + 0.1 + … is exact.

#include <coagent/runtime/settings.hpp>

#include <algorithm>
#include <cstdint>

namespace coagent {

class retry_budget {
  public:
    explicit retry_budget(const retry_budget_settings& s) noexcept
        : tokens_milli_(std::int64_t{s.max_tokens} * 1000) {}

    /// A retryable failure: takes one token. Returns true when a retry is still allowed.
    bool on_failure(const retry_budget_settings& s) noexcept {
        tokens_milli_ = std::clamp<std::int64_t>(tokens_milli_ - 1000, 0, max_milli(s));
        return allows_retry(s);
    }
    /// A successful attempt: adds tokenRatio, up to maxTokens.
    void on_success(const retry_budget_settings& s) noexcept {
        tokens_milli_ = std::min(tokens_milli_ + s.token_ratio_milli, max_milli(s));
    }
    /// tokens > maxTokens / 2
    bool allows_retry(const retry_budget_settings& s) const noexcept {
        return 2 * tokens_milli_ > max_milli(s);
    }
    std::int64_t tokens_milli() const noexcept { return tokens_milli_; }
    /// For a store that learned the level from elsewhere (another process's update).
    void set_tokens_milli(std::int64_t t) noexcept { tokens_milli_ = t; }

    static std::int64_t max_milli(const retry_budget_settings& s) noexcept {
        return std::int64_t{s.max_tokens} * 1000;
    }

  private:
    std::int64_t tokens_milli_;
};

}  // namespace coagent
