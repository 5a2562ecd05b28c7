#pragma once
// Internal: the pattern table compiled once with RE2, and saturating int64 arithmetic.

#include <coagent/classify/patterns.hpp>

#include <re2/re2.h>
#include <re2/set.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace coagent::detail {

struct compiled_patterns {
    std::vector<std::unique_ptr<const RE2>> entries;  // parallel to pattern_table()
    /// Every entry in one set (index = table index): one linear-time pass over a text tells
    /// which entries match; the single regexes then only run for captures.
    std::unique_ptr<RE2::Set> all;
    std::unique_ptr<const RE2> provider_error_type;
    std::unique_ptr<const RE2> duration_part;
};

/// Which table entries match `text`, as a bitmap indexed like pattern_table().
class match_result {
  public:
    explicit match_result(std::string_view text);
    bool matches(std::size_t index) const noexcept { return index < bits_.size() && bits_[index]; }
    /// Index of the first entry of `table` that matches, if any.
    std::optional<std::size_t> first(std::string_view table) const;

  private:
    std::vector<bool> bits_;
};

/// Compiled on first use (thread-safe function-local static). Throws std::logic_error naming
/// the entry if a pattern does not compile: a bug in the table, caught by the tests.
const compiled_patterns& compiled();

inline re2::StringPiece piece(std::string_view s) {
    return {s.data(), s.size()};
}
inline std::string_view view(re2::StringPiece s) {
    return {s.data(), s.size()};
}

/// parse_retry_hint with the set matches already computed.
std::optional<std::int64_t> retry_hint(const match_result& m, std::string_view text,
                                       std::int64_t now_ms);

}  // namespace coagent::detail
