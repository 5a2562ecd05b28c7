#pragma once
// latch: one coroutine waits until another party wakes it (or a deadline passes). A wake()
// before the wait is not lost; a wake() after the deadline fired is a no-op. One steady_timer,
// no allocation beyond it. Used by agent_session (prompts parked until the settle) and
// rpc_client (responses and wait_for_settled()).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>

namespace coagent {

class latch {
  public:
    explicit latch(const boost::asio::any_io_executor& ex)
        : timer_(ex, boost::asio::steady_timer::time_point::max()) {}
    latch(const latch&) = delete;
    latch& operator=(const latch&) = delete;

    /// Completes the wait (now, or at once when it begins later). Idempotent.
    void wake() noexcept {
        if (woken_) return;
        woken_ = true;
        timer_.cancel();
    }
    bool woken() const noexcept { return woken_; }

    /// Completes on the latch's executor once woken. The latch must outlive the wait. A
    /// cancellation of the awaiting coroutine (terminal) ends the wait too; the caller then
    /// sees woken() false.
    boost::asio::awaitable<void> wait() {
        if (woken_) co_return;
        timer_.expires_at(boost::asio::steady_timer::time_point::max());
        (void)co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }

    /// Waits until woken (returns false) or until `timeout` passed (returns true). A
    /// cancellation of the awaiting coroutine throws system_error(operation_aborted).
    boost::asio::awaitable<bool> wait_for(std::chrono::steady_clock::duration timeout) {
        if (woken_) co_return false;
        timer_.expires_after(timeout);
        auto [ec] = co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        if (woken_) co_return false;
        if (!ec) co_return true;
        throw boost::system::system_error(ec);
    }

  private:
    boost::asio::steady_timer timer_;
    bool woken_ = false;
};

}  // namespace coagent
