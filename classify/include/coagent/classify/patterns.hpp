#pragma once
// The versioned pattern table behind classify() (policy Appendix A): every regular expression
// the classifier uses, each with the provider it comes from and an example it must match.

#include <coagent/runtime/limit.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace coagent {

/// Bumped whenever an entry is added, removed, reordered or changed.
inline constexpr std::string_view pattern_table_version = "2026.12.1";

/// Extraction helpers (not decision rules): the provider's JSON error type
/// (`"type":"overloaded_error"`), and one part of a "try again in 2h 3m" duration.
inline constexpr std::string_view provider_error_type_regex =
    R"re("type"\s*:\s*"([a-z0-9_]+_error)")re";
inline constexpr std::string_view duration_part_regex =
    R"re((\d+)\s*(days?|d|hours?|h|minutes?|m|seconds?|s)\b)re";

/// How a "hint" entry's capture turns into milliseconds (unused by the other tables).
enum class hint_form {
    none,
    milliseconds,      // retry-after-ms=1500
    seconds,           // retry-after: 30 (decimals allowed)
    http_date,         // retry-after: Wed, 21 Oct 2026 07:28:00 GMT → date - now
    reset_ms,          // x-ratelimit-reset-ms: N (N > 1e12: epoch ms - now; else ms)
    reset_seconds,     // x-ratelimit-reset: N (N > 1e9: epoch s - now; else seconds)
    number_with_unit,  // try again in 1.898s / retry after 33 seconds / retry in 500ms
    duration_sum,      // try again in 2h 3m (days, hours, minutes, seconds summed)
    epoch_seconds,     // usage limit reached|1755772800 → epoch s - now
    iso8601,           // resets at 2026-11-29T18:00:00Z → time - now
};

/// One entry of the table. `table` is one of "overflow", "non_overflow", "usage_limit",
/// "retryable", "hint"; a decision names the entry as "<table>/<name>".
struct pattern_entry {
    std::string_view table;
    std::string_view name;     // the spelling of policy Appendix A (for hints: a short label)
    std::string_view regex;    // RE2 syntax; compiled case-insensitive, UTF-8
    std::string_view source;   // provider / origin of the pattern
    std::string_view example;  // a text the entry matches (checked by the tests)
    /// The kind of limit a decision by this entry reports: set on every usage_limit and
    /// retryable entry, none on the others.
    limit_kind limit = limit_kind::none;
    hint_form form = hint_form::none;
};

/// A retryable HTTP status (decision rule "status/<code>").
struct status_entry {
    int code;
    std::string_view source;
    limit_kind limit = limit_kind::none;
};

/// All entries, grouped by table, in the order the classifier tries them.
std::span<const pattern_entry> pattern_table() noexcept;

/// The HTTP statuses that are retryable when the provider gave a status.
std::span<const status_entry> retryable_statuses() noexcept;

/// Whether entry `index` of pattern_table() matches somewhere in `text` (with the compiled,
/// case-insensitive regex the classifier uses). Throws std::out_of_range on a bad index.
bool pattern_matches(std::size_t index, std::string_view text);

}  // namespace coagent
