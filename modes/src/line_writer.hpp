#pragma once
// The writing end of an RPC pipe, for rpc_mode (its stdout) and rpc_client (the child's
// stdin): lines are appended to a pending queue while one write is in flight, and the next
// write takes all of it (two buffers swapped, no copy per line). The queue is a policy:
// `pending_text` (a string; rpc_client) or rpc::output_queue (rpc_mode: merges message_updates
// above its bound). A Queue has take(std::string&), written(), has_pending() and clear().
// Private to modes/.

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace coagent::detail {

/// The plain queue: the text not written yet.
struct pending_text {
    std::string text;
    void take(std::string& out) {
        out.swap(text);
        text.clear();
    }
    void written() noexcept {}
    bool has_pending() const noexcept { return !text.empty(); }
    void clear() noexcept { text.clear(); }
};

template <class Stream, class Queue = pending_text>
class line_writer {
  public:
    using written_handler = std::function<void(boost::system::error_code)>;

    /// `on_written` runs after each write with its result, on the stream's executor, before the
    /// next write starts. After an error the pending text is dropped and nothing more is
    /// written. `owner`, when given, is kept alive while a write is in flight.
    template <class... QueueArgs>
    line_writer(Stream& stream, written_handler on_written, std::weak_ptr<void> owner = {},
                QueueArgs&&... queue_args)
        : s_(std::make_shared<state>(std::forward<QueueArgs>(queue_args)...)) {
        s_->stream = &stream;
        s_->on_written = std::move(on_written);
        s_->owner = std::move(owner);
    }

    /// Appends `text` (whole LF-terminated lines) and starts a write unless one is in flight.
    /// (pending_text) Appends `text` and starts a write unless one is in flight.
    void write(std::string text) {
        if (s_->stopped) return;
        auto& q = s_->queue.text;
        if (q.empty())
            q = std::move(text);
        else
            q += text;
        flush();
    }

    /// The queue of the next write, for a caller that appends in place; then call flush().
    Queue& queue() noexcept { return s_->queue; }
    const Queue& queue() const noexcept { return s_->queue; }
    /// Starts a write of what is queued unless one is in flight or nothing is.
    void flush() {
        if (!s_->stopped && !s_->in_flight && s_->queue.has_pending()) start(s_);
    }

    /// flush(), from a handler posted to the stream's executor: the lines queued until then (the
    /// events of one handler's run, say) go out in one write instead of the first on its own.
    void flush_soon() {
        auto& s = *s_;
        if (s.stopped || s.in_flight || s.flush_posted || !s.queue.has_pending()) return;
        s.flush_posted = true;
        boost::asio::post(s.stream->get_executor(), [st = s_, keep = s.owner.lock()] {
            st->flush_posted = false;
            if (!st->stopped && !st->in_flight && st->queue.has_pending()) start(st);
        });
    }

    /// Nothing more is written; what is queued is dropped (a write in flight completes).
    void stop() noexcept {
        s_->stopped = true;
        s_->queue.clear();
    }
    bool stopped() const noexcept { return s_->stopped; }
    /// No write in flight and nothing queued.
    bool idle() const noexcept { return !s_->in_flight && !s_->queue.has_pending(); }

  private:
    struct state {
        template <class... A>
        explicit state(A&&... a) : queue(std::forward<A>(a)...) {}
        Stream* stream = nullptr;
        written_handler on_written;
        std::weak_ptr<void> owner;
        Queue queue;
        std::string writing;
        bool in_flight = false;
        bool stopped = false;
        bool flush_posted = false;  // flush_soon()'s handler is on its way
    };

    static void start(const std::shared_ptr<state>& s) {
        s->in_flight = true;
        s->writing.clear();
        s->queue.take(s->writing);
        auto on_done = [s, keep = s->owner.lock()](boost::system::error_code ec, std::size_t) {
            s->in_flight = false;
            s->writing.clear();
            s->queue.written();
            if (ec) {
                s->stopped = true;
                s->queue.clear();
            }
            if (s->on_written) s->on_written(ec);
            if (!s->stopped && !s->in_flight && s->queue.has_pending()) start(s);
        };
        boost::asio::async_write(*s->stream, boost::asio::buffer(s->writing), std::move(on_done));
    }

    std::shared_ptr<state> s_;
};

}  // namespace coagent::detail
