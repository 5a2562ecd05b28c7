#pragma once
// A timer wait that another party can cancel: one timer plus one cancellation_signal bound to
// the wait through a cancellation_slot. The clock is a runtime choice (steady or manual), so
// sessions and providers run on a manual clock in tests.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <coagent/runtime/manual_clock.hpp>

#include <chrono>
#include <memory>
#include <tuple>
#include <variant>

namespace coagent {

enum class clock_kind { steady, manual };

/// One cancellable wait at a time, on a timer of the clock chosen at construction.
class cancellable_wait {
  public:
    cancellable_wait(boost::asio::any_io_executor ex, clock_kind k)
        : timer_(make_timer(std::move(ex), k)) {}

    /// The timer wait itself (d > 0) for any completion token; signature
    /// void(boost::system::error_code), operation_aborted on cancel(). Callers that keep many
    /// parked waits await `async_wait(d, as_tuple(deferred))` directly: unlike use_awaitable,
    /// that creates no coroutine frame. cancel() is the only cancellation honoured (the wait
    /// is bound to this object's own slot; a slot bound to the token is not used).
    template <typename CompletionToken>
    auto async_wait(std::chrono::nanoseconds d, CompletionToken&& token) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [this](auto handler, std::chrono::nanoseconds dur) {
                std::visit(
                    [&](auto& t) {
                        using timer = std::decay_t<decltype(t)>;
                        t.expires_after(std::chrono::duration_cast<typename timer::duration>(dur));
                        t.async_wait(boost::asio::bind_cancellation_slot(signal_.slot(),
                                                                         std::move(handler)));
                    },
                    timer_);
            },
            token, d);
    }

    /// Completes with true when `d` elapsed, false when cancel() (or terminal cancellation of
    /// the awaiting coroutine) ended it first. Runs on the executor given at construction; the
    /// object must outlive the wait. A non-positive duration arms no timer: it posts and
    /// completes with true. A cancel() that lands after the timer fired but before resumption
    /// is not seen here: callers keep a sticky flag (docs/contributing.md) and check it after
    /// resuming.
    boost::asio::awaitable<bool> wait(std::chrono::nanoseconds d) {
        if (d <= std::chrono::nanoseconds::zero()) {
            co_await boost::asio::post(executor(), boost::asio::use_awaitable);
            co_return true;
        }
        auto [ec] = co_await async_wait(d, boost::asio::as_tuple(boost::asio::deferred));
        co_return !ec;
    }

    /// Cancels the wait in progress, if any. No effect when nothing waits.
    void cancel() noexcept { signal_.emit(boost::asio::cancellation_type::terminal); }

    boost::asio::any_io_executor executor() {
        return std::visit([](auto& t) { return boost::asio::any_io_executor(t.get_executor()); },
                          timer_);
    }

  private:
    using timer_variant = std::variant<boost::asio::steady_timer, manual_timer>;
    static timer_variant make_timer(boost::asio::any_io_executor ex, clock_kind k) {
        if (k == clock_kind::manual)
            return timer_variant(std::in_place_type<manual_timer>, std::move(ex));
        return timer_variant(std::in_place_type<boost::asio::steady_timer>, std::move(ex));
    }

    timer_variant timer_;
    boost::asio::cancellation_signal signal_;
};

inline std::unique_ptr<cancellable_wait> make_cancellable_wait(boost::asio::any_io_executor ex,
                                                               clock_kind k) {
    return std::make_unique<cancellable_wait>(std::move(ex), k);
}

}  // namespace coagent

namespace coagent {

/// Sleeps `d` on a timer of the given clock, cancellable through `slot`. Completes with true
/// when the time elapsed, false when cancelled. A non-positive duration completes at once.
inline boost::asio::awaitable<bool> sleep_for(boost::asio::any_io_executor ex, clock_kind k,
                                              std::chrono::nanoseconds d,
                                              boost::asio::cancellation_slot slot) {
    if (d <= std::chrono::nanoseconds::zero()) co_return true;
    // the slot's handler refers to the timer, which dies with this frame: clear it after the
    // wait, so a later emit on the slot cannot reach a destroyed timer
    boost::system::error_code ec;
    if (k == clock_kind::manual) {
        manual_timer t(ex);
        t.expires_after(d);
        std::tie(ec) = co_await t.async_wait(boost::asio::bind_cancellation_slot(
            slot, boost::asio::as_tuple(boost::asio::use_awaitable)));
    } else {
        boost::asio::steady_timer t(ex);
        t.expires_after(d);
        std::tie(ec) = co_await t.async_wait(boost::asio::bind_cancellation_slot(
            slot, boost::asio::as_tuple(boost::asio::use_awaitable)));
    }
    if (slot.is_connected()) slot.clear();
    co_return !ec;
}

}  // namespace coagent
