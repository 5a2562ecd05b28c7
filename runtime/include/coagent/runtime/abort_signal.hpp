#pragma once
// A sticky abort request: requested() stays true after request(), so a request that lands
// while nothing is bound to the slot is still seen after the next resume (docs/contributing.md).

#include <boost/asio/cancellation_signal.hpp>

namespace coagent {

class abort_signal {
  public:
    /// Requests the abort and emits terminal cancellation to whatever is bound to slot().
    void request() noexcept {
        requested_ = true;
        signal_.emit(boost::asio::cancellation_type::terminal);
    }
    bool requested() const noexcept { return requested_; }
    /// Bind waits to this slot (one at a time) so request() cancels them.
    boost::asio::cancellation_slot slot() noexcept { return signal_.slot(); }
    void reset() noexcept { requested_ = false; }

  private:
    boost::asio::cancellation_signal signal_;
    bool requested_ = false;
};

}  // namespace coagent
