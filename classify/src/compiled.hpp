#pragma once
// Internal: the pattern table compiled once with RE2, and saturating int64 arithmetic.

#include <coagent/classify/patterns.hpp>

#include <re2/re2.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace coagent::detail {

struct compiled_patterns {
    std::vector<std::unique_ptr<const RE2>> entries;  // parallel to pattern_table()
    std::unique_ptr<const RE2> provider_error_type;
    std::unique_ptr<const RE2> duration_part;
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

/// Index of the first entry of `table` matching `text`, if any.
std::optional<std::size_t> first_match(std::string_view table, std::string_view text);

inline constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();

inline std::int64_t sat_add(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? int64_max : int64_min;
    return r;
}
inline std::int64_t sat_sub(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? int64_max : int64_min;
    return r;
}
inline std::int64_t sat_mul(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? int64_min : int64_max;
    return r;
}

}  // namespace coagent::detail
