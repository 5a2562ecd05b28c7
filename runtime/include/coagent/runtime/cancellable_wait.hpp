#pragma once
// A timer wait that another party can cancel: one timer plus one cancellation_signal bound to
// the wait through a cancellation_slot. The clock is a runtime choice (steady or manual), so
// sessions and providers run on a manual clock in tests.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <coagent/runtime/manual_clock.hpp>

#include <chrono>
#include <memory>
#include <tuple>

namespace coagent {

namespace asio = boost::asio;

enum class clock_kind { steady, manual };

/// One cancellable wait at a time.
class cancellable_wait {
public:
    virtual ~cancellable_wait() = default;

    /// Completes with true when `d` elapsed, false when cancel() (or terminal cancellation of
    /// the awaiting coroutine) ended it first. Runs on the executor given at construction; the
    /// object must outlive the wait. A non-positive duration arms no timer: it posts and
    /// completes with true. A cancel() that lands after the timer fired but before resumption
    /// is not seen here: callers keep a sticky flag (conventions.md) and check it after resuming.
    asio::awaitable<bool> wait(std::chrono::nanoseconds d) {
        if (d <= std::chrono::nanoseconds::zero()) {
            co_await asio::post(executor(), asio::use_awaitable);
            co_return true;
        }
        auto [ec] = co_await async_wait(d);
        co_return !ec;
    }

    /// The timer wait itself (d > 0), without a coroutine frame of its own: callers that keep
    /// many parked waits await this directly. Completes with operation_aborted on cancel().
    virtual asio::awaitable<std::tuple<boost::system::error_code>> async_wait(std::chrono::nanoseconds d) = 0;

    /// Cancels the wait in progress, if any. No effect when nothing waits.
    virtual void cancel() noexcept = 0;

    virtual asio::any_io_executor executor() = 0;
};

template <typename Timer>
class basic_cancellable_wait final : public cancellable_wait {
public:
    explicit basic_cancellable_wait(asio::any_io_executor ex) : timer_(std::move(ex)) {}

    asio::awaitable<std::tuple<boost::system::error_code>> async_wait(std::chrono::nanoseconds d) override {
        timer_.expires_after(std::chrono::duration_cast<typename Timer::duration>(d));
        return timer_.async_wait(
            asio::bind_cancellation_slot(signal_.slot(), asio::as_tuple(asio::use_awaitable)));
    }

    void cancel() noexcept override { signal_.emit(asio::cancellation_type::terminal); }

    asio::any_io_executor executor() override { return timer_.get_executor(); }

private:
    Timer timer_;
    asio::cancellation_signal signal_;
};

inline std::unique_ptr<cancellable_wait> make_cancellable_wait(asio::any_io_executor ex,
                                                               clock_kind k) {
    if (k == clock_kind::manual)
        return std::make_unique<basic_cancellable_wait<manual_timer>>(std::move(ex));
    return std::make_unique<basic_cancellable_wait<asio::steady_timer>>(std::move(ex));
}

}  // namespace coagent

namespace coagent {

/// Sleeps `d` on a timer of the given clock, cancellable through `slot`. Completes with true
/// when the time elapsed, false when cancelled. A non-positive duration completes at once.
inline asio::awaitable<bool> sleep_for(asio::any_io_executor ex, clock_kind k,
                                       std::chrono::nanoseconds d, asio::cancellation_slot slot) {
    if (d <= std::chrono::nanoseconds::zero()) co_return true;
    // the slot's handler refers to the timer, which dies with this frame: clear it after the
    // wait, so a later emit on the slot cannot reach a destroyed timer
    boost::system::error_code ec;
    if (k == clock_kind::manual) {
        manual_timer t(ex);
        t.expires_after(d);
        std::tie(ec) = co_await t.async_wait(
            asio::bind_cancellation_slot(slot, asio::as_tuple(asio::use_awaitable)));
    } else {
        asio::steady_timer t(ex);
        t.expires_after(d);
        std::tie(ec) = co_await t.async_wait(
            asio::bind_cancellation_slot(slot, asio::as_tuple(asio::use_awaitable)));
    }
    if (slot.is_connected()) slot.clear();
    co_return !ec;
}

}  // namespace coagent
