#pragma once
// When a provider's read must complete (docs/reliability.md "Limits"): the idle timeout
// (provider.streamIdleTimeoutMs) restarts on progress only, and the whole attempt has its own
// deadline (provider.attemptTimeoutMs, 0 = none). Plain code: times are parameters.

#include <chrono>
#include <cstdint>
#include <string>

namespace coagent {

class stream_deadline {
  public:
    using clock = std::chrono::steady_clock;

    /// An attempt that started at `start`. `attempt_ms` <= 0: no attempt deadline.
    stream_deadline(clock::time_point start, std::int64_t idle_ms, std::int64_t attempt_ms) noexcept
        : idle_(idle_ms), attempt_ms_(attempt_ms), idle_until_(start + idle_) {
        if (attempt_ms > 0) attempt_until_ = start + std::chrono::milliseconds(attempt_ms);
    }

    /// Progress at `now` (bytes of the response other than SSE comments): the idle timer
    /// restarts.
    void on_progress(clock::time_point now) noexcept { idle_until_ = now + idle_; }

    /// When the read in progress must have completed: the earlier of the two deadlines.
    clock::time_point expiry() const noexcept {
        return attempt_until_ < idle_until_ ? attempt_until_ : idle_until_;
    }

    /// Whether the attempt's own deadline has passed at `now`.
    bool attempt_expired(clock::time_point now) const noexcept { return now >= attempt_until_; }

    /// The error of a read that timed out at `now` (retryable: both match "timed out"):
    /// "Attempt timeout: no complete reply within provider.attemptTimeoutMs (N ms) (timed out)"
    /// once the attempt's deadline passed, else "Stream idle timeout: no data for N ms (timed
    /// out)".
    std::string timeout_text(clock::time_point now) const {
        if (attempt_expired(now))
            return "Attempt timeout: no complete reply within provider.attemptTimeoutMs (" +
                   std::to_string(attempt_ms_) + " ms) (timed out)";
        return "Stream idle timeout: no data for " + std::to_string(idle_.count()) +
               " ms (timed out)";
    }

  private:
    std::chrono::milliseconds idle_;
    std::int64_t attempt_ms_;
    clock::time_point idle_until_;
    clock::time_point attempt_until_ = clock::time_point::max();
};

}  // namespace coagent
