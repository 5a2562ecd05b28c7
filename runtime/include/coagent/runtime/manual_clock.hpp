#pragma once
// A manual clock for tests: time moves only when the test calls advance(). Timers on it
// (`manual_timer`) never block the io_context (zero_wait_traits), so tests drive them with
// io_context::poll() after each advance().

#include <boost/asio/basic_waitable_timer.hpp>

#include <atomic>
#include <chrono>

namespace coagent {

struct manual_clock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<manual_clock>;
    static constexpr bool is_steady = true;

    static time_point now() noexcept { return time_point(duration(now_ns().load())); }
    static void advance(duration d) noexcept { now_ns().fetch_add(d.count()); }
    /// Back to time zero (between tests).
    static void reset() noexcept { now_ns().store(0); }

  private:
    static std::atomic<rep>& now_ns() noexcept {
        static std::atomic<rep> v{0};
        return v;
    }
};

/// Wait traits that make the io_context never sleep on a manual timer.
template <typename Clock>
struct zero_wait_traits {
    static typename Clock::duration to_wait_duration(const typename Clock::duration&) {
        return typename Clock::duration(0);
    }
    static typename Clock::duration to_wait_duration(const typename Clock::time_point&) {
        return typename Clock::duration(0);
    }
};

using manual_timer =
    boost::asio::basic_waitable_timer<manual_clock, zero_wait_traits<manual_clock>>;

}  // namespace coagent
