#pragma once
// listener_list: callbacks called in subscription order, and the RAII subscription that removes
// one. A listener may subscribe or unsubscribe (itself or another) while the list dispatches:
// removal only clears the entry then, and the list is compacted once the outermost dispatch
// returns. Used by agent_session (events) and rpc_client (the RPC event stream).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace coagent {

namespace detail {
// what a subscription removes itself from
class listener_registry {
  public:
    virtual void remove(std::uint64_t id) noexcept = 0;

  protected:
    ~listener_registry() = default;
};
}  // namespace detail

/// Removes its listener on destruction (RAII). Without a liveness guard it must not outlive
/// the list it came from; with one (rpc_client's) it may, and then does nothing.
class subscription {
  public:
    subscription() = default;
    subscription(detail::listener_registry* r, std::uint64_t id) noexcept : r_(r), id_(id) {}
    subscription(detail::listener_registry* r, std::uint64_t id, std::weak_ptr<void> alive)
        : r_(r), id_(id), alive_(std::move(alive)), guarded_(true) {}
    subscription(subscription&& o) noexcept
        : r_(std::exchange(o.r_, nullptr)),
          id_(o.id_),
          alive_(std::move(o.alive_)),
          guarded_(o.guarded_) {}
    subscription& operator=(subscription&& o) noexcept {
        if (this != &o) {
            reset();
            r_ = std::exchange(o.r_, nullptr);
            id_ = o.id_;
            alive_ = std::move(o.alive_);
            guarded_ = o.guarded_;
        }
        return *this;
    }
    subscription(const subscription&) = delete;
    subscription& operator=(const subscription&) = delete;
    ~subscription() { reset(); }

    /// Removes the listener now (no effect when already removed, or when the guarded owner is
    /// gone).
    void reset() noexcept {
        detail::listener_registry* const r = std::exchange(r_, nullptr);
        if (!r) return;
        if (!guarded_) {
            r->remove(id_);
        } else if (auto alive = alive_.lock()) {
            r->remove(id_);
        }
        alive_.reset();
    }

  private:
    detail::listener_registry* r_ = nullptr;
    std::uint64_t id_ = 0;
    std::weak_ptr<void> alive_;
    bool guarded_ = false;
};

template <typename... Args>
class listener_list final : public detail::listener_registry {
  public:
    using listener = std::function<void(Args...)>;

    listener_list() = default;
    listener_list(const listener_list&) = delete;
    listener_list& operator=(const listener_list&) = delete;

    /// Adds a listener; the subscription removes it.
    [[nodiscard]] subscription add(listener l) {
        const std::uint64_t id = next_id_++;
        entries_.push_back({id, std::move(l)});
        return subscription(this, id);
    }
    /// The same, with a liveness guard: the subscription may outlive this list.
    [[nodiscard]] subscription add(listener l, std::weak_ptr<void> alive) {
        const std::uint64_t id = next_id_++;
        entries_.push_back({id, std::move(l)});
        return subscription(this, id, std::move(alive));
    }

    /// Calls every listener in subscription order, including those added meanwhile.
    template <typename... A>
    void dispatch(const A&... args) {
        ++depth_;
        for (std::size_t i = 0; i < entries_.size(); ++i)  // index loop: a listener may add one
            if (entries_[i].fn) entries_[i].fn(args...);
        if (--depth_ == 0 && dirty_) compact();
    }

    void remove(std::uint64_t id) noexcept override {
        for (auto& e : entries_)
            if (e.id == id) {
                e.fn = nullptr;
                dirty_ = true;
            }
        if (depth_ == 0 && dirty_) compact();
    }

    /// Drops every listener (their subscriptions then do nothing).
    void clear() noexcept {
        for (auto& e : entries_) e.fn = nullptr;
        dirty_ = true;
        if (depth_ == 0) compact();
    }

    bool empty() const noexcept {
        for (const auto& e : entries_)
            if (e.fn) return false;
        return true;
    }

  private:
    struct entry {
        std::uint64_t id;
        listener fn;
    };
    void compact() noexcept {
        std::erase_if(entries_, [](const entry& e) { return !e.fn; });
        dirty_ = false;
    }

    std::vector<entry> entries_;
    std::uint64_t next_id_ = 1;
    int depth_ = 0;
    bool dirty_ = false;
};

}  // namespace coagent
