#pragma once
// prompt_queue: the messages sent while a session is busy (steer / follow_up) and the prompt
// calls parked until they run or the session settles. Plain code apart from the latches the
// parked prompts wait on; agent_session owns one. Not part of the API.

#include <coagent/runtime/latch.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/session/run_policy.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace coagent::detail {

class prompt_queue {
  public:
    struct queued {
        message_ptr msg;
        std::uint64_t id;  // the prompt call that queued it
    };
    // a prompt parked in its own frame: what the queue may tell it before waking it
    struct parked {
        std::uint64_t id;
        latch* wake;
        bool* cancelled;                       // its message was taken out before it ran
        std::optional<prompt_result>* result;  // abort() ended its run, or dropped its message
        bool* run_now;        // a manual compaction hands the queue over to this prompt
        bool joined = false;  // its message joined a backoff: it is part of the running prompt
    };

    void push(bool steer, message_ptr m, std::uint64_t id) {
        (steer ? steers_ : follow_ups_).push_back({std::move(m), id});
    }
    bool empty() const noexcept { return steers_.empty() && follow_ups_.empty(); }
    std::size_t size() const noexcept { return steers_.size() + follow_ups_.size(); }
    bool has_steers() const noexcept { return !steers_.empty(); }

    /// The steering messages, all at once (a listener may queue more while they are emitted).
    std::vector<queued> take_steers() noexcept { return std::exchange(steers_, {}); }
    /// The oldest follow-up, if any.
    std::optional<queued> pop_follow_up() {
        if (follow_ups_.empty()) return std::nullopt;
        queued q = std::move(follow_ups_.front());
        follow_ups_.erase(follow_ups_.begin());
        return q;
    }
    /// The oldest follow-up if prompt `id` queued it.
    message_ptr pop_follow_up_of(std::uint64_t id) {
        if (follow_ups_.empty() || follow_ups_.front().id != id) return nullptr;
        return pop_follow_up()->msg;
    }

    void park(parked p) { parked_.push_back(p); }
    /// Prompt `id` is parked because its message joined a backoff.
    bool joined(std::uint64_t id) const noexcept {
        return std::any_of(parked_.begin(), parked_.end(),
                           [&](const parked& p) { return p.id == id && p.joined; });
    }
    void unpark(const latch* l) noexcept {
        std::erase_if(parked_, [&](const parked& p) { return p.wake == l; });
    }

    /// Prompt `id` was cancelled: when its message is still queued only that message goes, its
    /// prompt is woken and true returned.
    bool cancel(std::uint64_t id) {
        for (auto* q : {&steers_, &follow_ups_})
            for (auto it = q->begin(); it != q->end(); ++it)
                if (it->id == id) {
                    q->erase(it);
                    for (auto& p : parked_)
                        if (p.id == id) {
                            *p.cancelled = true;
                            p.wake->wake();
                        }
                    return true;
                }
        return false;
    }
    /// abort(): every queued message is dropped; its prompt will complete with `dropped`.
    void drop_all(const prompt_result& dropped) {
        for (auto* q : {&steers_, &follow_ups_}) {
            for (const auto& m : *q) set_result(m.id, dropped);
            q->clear();
        }
    }
    /// The result prompt `id` (parked) completes with.
    void set_result(std::uint64_t id, const prompt_result& r) {
        for (auto& p : parked_)
            if (p.id == id) *p.result = r;
    }
    /// After a manual compaction: the prompt of the first queued message runs the queue (the
    /// oldest follow-up first, else the oldest steering message). False when nothing is queued
    /// or its prompt was cancelled.
    bool hand_over() {
        const std::uint64_t next = !follow_ups_.empty() ? follow_ups_.front().id
                                   : !steers_.empty()   ? steers_.front().id
                                                        : 0;
        if (next == 0) return false;
        for (auto& p : parked_)
            if (p.id == next && !*p.cancelled) {
                *p.run_now = true;
                p.wake->wake();
                return true;
            }
        return false;
    }
    /// The settle: every parked prompt wakes. Returns whether one of them was not cancelled.
    bool wake_all() noexcept {
        bool live = false;
        for (auto& p : parked_) {
            live = live || !*p.cancelled;
            p.wake->wake();
        }
        parked_.clear();
        return live;
    }

  private:
    // small FIFOs (a std::deque would allocate ~1 KiB per session up front)
    std::vector<queued> steers_;
    std::vector<queued> follow_ups_;
    std::vector<parked> parked_;
};

}  // namespace coagent::detail
