#pragma once
// The output queue of RPC mode (docs/rpc.md "Output"): the lines waiting for stdout, bounded.
// Above a soft bound consecutive message_update events of the same content block become one
// (its delta the concatenation of theirs, its message the latest partial); above a hard bound
// the caller stops reading stdin until the queue drains. Plain code, no I/O: rpc_mode writes
// what take() gives it.

#include <coagent/runtime/event.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace coagent::rpc {

class output_queue {
  public:
    /// Above this many queued bytes, message_updates are merged: 8 MiB.
    static constexpr std::size_t default_merge_above = std::size_t{8} * 1024 * 1024;
    /// Above this many queued bytes, stdin is not read (backpressure): 64 MiB.
    static constexpr std::size_t default_pause_above = std::size_t{64} * 1024 * 1024;

    struct limits {
        std::size_t merge_above = default_merge_above;
        std::size_t pause_above = default_pause_above;
    };

    output_queue() = default;
    explicit output_queue(limits l) : limits_(l) {}

    /// A complete line (with its '\n'), e.g. a response: queued as it is, never merged or
    /// dropped.
    void push_line(std::string_view line);
    /// An event as one line. A message_update pushed while the queue holds more than
    /// merge_above bytes joins the message_update just before it when nothing came between
    /// them and both extend the same content block of the same message.
    void push_event(const event& e);

    /// Moves everything queued into `out` (replacing its contents) for one write; those bytes
    /// count as queued until written() is called.
    void take(std::string& out);
    /// The write of the bytes of the last take() completed (or failed).
    void written() noexcept { in_flight_ = 0; }
    /// Drops everything not yet taken (stdout is broken).
    void clear() noexcept;

    /// Something is waiting to be taken.
    bool has_pending() const noexcept { return !pending_.empty() || open_.has_value(); }
    /// Queued bytes: waiting, plus taken and not yet written. A merged update counts as its
    /// estimated size (its last line's size plus twice its merged deltas).
    std::size_t bytes() const noexcept;
    /// More than pause_above bytes queued: the caller should not read more input.
    bool over_pause() const noexcept { return bytes() > limits_.pause_above; }

    /// message_updates that were merged into the one before them.
    std::uint64_t merged() const noexcept { return merged_; }
    const limits& bounds() const noexcept { return limits_; }

  private:
    static constexpr std::size_t npos = static_cast<std::size_t>(-1);
    // A message_update not yet serialised, which later updates of the same block may join.
    struct open_update {
        message_ptr msg;
        std::string delta;
        std::size_t block = 0;  // the content block its deltas extend
    };
    // The content block `u` extended (npos: not known), from the text sizes of the message's
    // blocks at its previous update: O(1) while one block grows, O(blocks) when they change.
    std::size_t locate(const message_update_event& u);
    void track(const message_ptr& m);  // records the sizes of m's blocks
    bool try_merge(const message_update_event& u, std::size_t block);
    void freeze();  // serialises the open update into pending_

    limits limits_{};
    std::string pending_;
    std::optional<open_update> open_;
    std::size_t in_flight_ = 0;
    std::size_t last_update_line_ = 0;  // bytes of the last message_update line serialised
    std::uint64_t merged_ = 0;
    message_ptr tracked_;             // the message whose block sizes are recorded
    std::vector<std::size_t> sizes_;  // text bytes of each of its blocks at the last update
    std::size_t last_block_ = npos;   // the block of its last update
};

}  // namespace coagent::rpc
