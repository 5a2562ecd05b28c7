#pragma once
// The one size limit of a streamed reply (docs/reliability.md "Limits"): every byte the reply
// holds — text, thinking, tool-call names, ids and arguments — and a fixed charge per content
// block count against one budget, and tool-call names and ids have bounds of their own. Plain
// code, no I/O: the stream decoders ask it before they keep anything.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace coagent::http_protocol {

class reply_budget {
  public:
    /// The whole reply: 16 MiB (the session-file line of a reply stays under the line limit).
    static constexpr std::size_t default_max_bytes = std::size_t{16} * 1024 * 1024;
    /// What one content block costs beyond its bytes: about what an empty block takes in
    /// memory, so a reply of empty blocks is bounded too (at most 65536 of them).
    static constexpr std::size_t block_bytes = 256;
    /// A tool-call name: 256 bytes (providers allow 64 characters).
    static constexpr std::size_t max_tool_name_bytes = 256;
    /// A tool-call id: 512 bytes (providers send about 30).
    static constexpr std::size_t max_tool_id_bytes = 512;

    explicit reply_budget(std::size_t max_bytes = default_max_bytes) noexcept : max_(max_bytes) {}

    /// Counts `n` more bytes; false (and nothing counted) when they do not fit.
    bool take(std::size_t n) noexcept {
        if (n > max_ - used_) return false;
        used_ += n;
        return true;
    }
    /// A content block: block_bytes.
    bool take_block() noexcept { return take(block_bytes); }
    /// A field replaced by a value of `new_size` bytes: its old `old_size` bytes are given back.
    bool replace(std::size_t old_size, std::size_t new_size) noexcept {
        used_ -= std::min(old_size, used_);
        if (take(new_size)) return true;
        used_ += old_size;  // unchanged
        return false;
    }

    std::size_t used() const noexcept { return used_; }
    std::size_t max_bytes() const noexcept { return max_; }
    void set_max_bytes(std::size_t n) noexcept { max_ = n; }

    /// The error text of a reply over the budget (not retryable: the same request streams the
    /// same reply).
    std::string too_large_text() const;

    /// The error text when a tool-call name (`what` = "name") or id (`what` = "id") of `size`
    /// bytes is over its bound, or nullopt when it is within it.
    static std::optional<std::string> field_error(std::string_view what, std::size_t size);

  private:
    std::size_t max_;
    std::size_t used_ = 0;
};

}  // namespace coagent::http_protocol
