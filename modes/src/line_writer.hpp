#pragma once
// The writing end of an RPC pipe, for rpc_mode (its stdout) and rpc_client (the child's
// stdin): lines are appended to a pending buffer while one write is in flight, and the next
// write takes the whole buffer (two buffers swapped, no copy per line). Private to modes/.

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace coagent::detail {

template <class Stream>
class line_writer {
  public:
    using written_handler = std::function<void(boost::system::error_code)>;

    /// `on_written` runs after each write with its result, on the stream's executor, before the
    /// next write starts. After an error the pending text is dropped and nothing more is
    /// written. `owner`, when given, is kept alive while a write is in flight.
    line_writer(Stream& stream, written_handler on_written, std::weak_ptr<void> owner = {})
        : s_(std::make_shared<state>()) {
        s_->stream = &stream;
        s_->on_written = std::move(on_written);
        s_->owner = std::move(owner);
    }

    /// Appends `text` (whole LF-terminated lines) and starts a write unless one is in flight.
    void write(std::string text) {
        if (s_->stopped) return;
        if (s_->pending.empty())
            s_->pending = std::move(text);
        else
            s_->pending += text;
        flush();
    }

    /// The text of the next write, for a caller that appends in place; then call flush().
    std::string& pending() noexcept { return s_->pending; }
    /// Starts a write of the pending text unless one is in flight or there is none.
    void flush() {
        if (!s_->stopped && !s_->in_flight && !s_->pending.empty()) start(s_);
    }

    /// Nothing more is written; the pending text is dropped (a write in flight completes).
    void stop() noexcept {
        s_->stopped = true;
        s_->pending.clear();
    }
    bool stopped() const noexcept { return s_->stopped; }
    /// No write in flight and nothing pending.
    bool idle() const noexcept { return !s_->in_flight && s_->pending.empty(); }

  private:
    struct state {
        Stream* stream = nullptr;
        written_handler on_written;
        std::weak_ptr<void> owner;
        std::string pending, writing;
        bool in_flight = false;
        bool stopped = false;
    };

    static void start(const std::shared_ptr<state>& s) {
        s->in_flight = true;
        s->writing.swap(s->pending);
        s->pending.clear();
        auto on_done = [s, keep = s->owner.lock()](boost::system::error_code ec, std::size_t) {
            s->in_flight = false;
            s->writing.clear();
            if (ec) {
                s->stopped = true;
                s->pending.clear();
            }
            if (s->on_written) s->on_written(ec);
            if (!s->stopped && !s->in_flight && !s->pending.empty()) start(s);
        };
        boost::asio::async_write(*s->stream, boost::asio::buffer(s->writing), std::move(on_done));
    }

    std::shared_ptr<state> s_;
};

}  // namespace coagent::detail
