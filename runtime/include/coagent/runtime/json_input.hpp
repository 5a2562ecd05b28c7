#pragma once
// JSON read from outside (RPC lines, settings.json, models.json, auth.json, session files,
// provider streams, faux scripts): one strict parser that also refuses numbers beyond the double
// range, saturating conversions of JSON numbers to int64, and text cut for error messages.
//
// Why: Boost.JSON 1.81 parses `1e400` as infinity and serialises it as `Infinity`, which no JSON
// reader accepts; so a value read from outside and written back (an RPC id, an unknown settings
// key, tool-call arguments in the session file) must never hold a non-finite number.

#include <boost/json/parse_options.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace coagent {

namespace json = boost::json;

/// Why parse_json_strict refused its input.
struct json_input_error {
    bool non_finite = false;  // a number beyond the double range, else invalid JSON
    std::string message;      // Boost.JSON's message ("syntax error", "document too deep", ...)
    std::string path;         // non_finite: where ("usage.input_tokens", "args[2]"); "" = top level
    std::size_t offset = 0;   // invalid JSON: byte offset where parsing stopped
    std::size_t line = 0;     // invalid JSON: 1-based line of `offset`
    std::size_t column = 0;   // invalid JSON: 1-based column of `offset`, in characters

    /// "syntax error", or `number out of range at "usage.input_tokens" (a JSON number must fit
    /// a double: at most about 1.8e308)`.
    std::string describe() const;
};

/// The result of parse_json_strict: `value` when `error` is empty.
struct strict_json {
    json::value value;
    std::optional<json_input_error> error;
    explicit operator bool() const noexcept { return !error; }
};

/// Parses one JSON text with Boost.JSON (strict: no comments, no trailing commas, valid UTF-8
/// unless `opts` says otherwise; depth 32 by default) and refuses a number that does not fit a
/// double (±infinity after parsing). Never throws for bad input.
strict_json parse_json_strict(std::string_view text, const json::parse_options& opts = {});
/// The same, the value's memory from `sp` (e.g. a monotonic_resource over a buffer of the
/// caller's frame, for a value that does not outlive it).
strict_json parse_json_strict(std::string_view text, const json::parse_options& opts,
                              json::storage_ptr sp);

/// The path of the first non-finite number in `v` ("" when `v` itself is one), or nullopt.
std::optional<std::string> find_non_finite(const json::value& v);

/// 1-based line and column (in UTF-8 characters) of byte `offset` of `text`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t offset) noexcept;

// ---- saturating integers ----------------------------------------------------------------------

inline constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();

/// a + b, clamped to the int64 range.
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? int64_max : int64_min;
    return r;
}

/// A double as an int64: truncated toward zero, clamped to the int64 range; NaN gives 0.
constexpr std::int64_t saturating_int64(double d) noexcept {
    if (!(d == d)) return 0;
    constexpr double two_63 = 9223372036854775808.0;  // int64 holds [-2^63, 2^63)
    if (d >= two_63) return int64_max;
    if (d < -two_63) return int64_min;
    return static_cast<std::int64_t>(d);
}

/// A JSON number as an int64, saturated (uint64 above INT64_MAX gives INT64_MAX; doubles as
/// above); nullopt if `v` is not a number.
std::optional<std::int64_t> saturating_int64(const json::value& v) noexcept;

// ---- text for error messages ------------------------------------------------------------------

/// `s` if it has at most `max_bytes` bytes, else its first bytes cut on a UTF-8 code-point
/// boundary, with "..." appended, `max_bytes` bytes in all (max_bytes >= 4).
std::string cut_utf8(std::string s, std::size_t max_bytes);

/// `s` as valid UTF-8: every ill-formed sequence (a stray continuation byte, a truncated or
/// overlong sequence, a surrogate, a code point beyond U+10FFFF; each maximal subpart, as
/// Unicode recommends) becomes U+FFFD. Applied where outside text enters coagent (`-p`, the
/// working directory, a provider's error text), so every line coagent writes is valid UTF-8.
std::string to_valid_utf8(std::string_view s);

/// Compact JSON of `v` for an error message, cut by cut_utf8 (80 bytes by default).
std::string json_excerpt(const json::value& v, std::size_t max_bytes = 80);

}  // namespace coagent
