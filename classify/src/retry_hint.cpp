// Retry hints in error texts (policy Appendix A): the forms of the "hint" table, tried in
// order. Dates are converted with the civil-date arithmetic of <coagent/runtime/time_math.hpp>;
// every number saturates at int64 limits instead of overflowing.

#include <coagent/classify/classify.hpp>
#include <coagent/classify/patterns.hpp>

#include "compiled.hpp"

#include <coagent/runtime/time_math.hpp>

#include <algorithm>
#include <array>

namespace coagent {
namespace {

constexpr bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}
constexpr char lower(char c) noexcept {
    return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
}

/// Decimal digits → int64, saturating. Non-digits are ignored (the regexes only capture digits).
std::int64_t parse_uint(std::string_view digits) noexcept {
    std::int64_t r = 0;
    for (char c : digits) {
        if (is_digit(c)) r = sat_add(sat_mul(r, 10), c - '0');
    }
    return r;
}

/// ceil(number * 10^scale) for a non-negative decimal "123" or "1.898", exactly (no floating
/// point: 1.898 s must be 1898 ms, not 1899), saturating.
std::int64_t scaled_ceil(std::string_view whole, std::string_view frac,
                         std::size_t scale) noexcept {
    std::int64_t r = parse_uint(whole);
    for (std::size_t k = 0; k < scale; ++k) {
        r = sat_add(sat_mul(r, 10), k < frac.size() && is_digit(frac[k]) ? frac[k] - '0' : 0);
    }
    if (frac.size() > scale) {
        const auto rest = frac.substr(scale);
        if (std::any_of(rest.begin(), rest.end(), [](char c) { return c >= '1' && c <= '9'; }))
            r = sat_add(r, 1);
    }
    return r;
}

std::int64_t scaled_ceil(std::string_view number, std::size_t scale) noexcept {
    const auto dot = number.find('.');
    if (dot == std::string_view::npos) return scaled_ceil(number, {}, scale);
    return scaled_ceil(number.substr(0, dot), number.substr(dot + 1), scale);
}

int two(std::string_view s, std::size_t pos) noexcept {
    return (s[pos] - '0') * 10 + (s[pos + 1] - '0');
}

/// "2026-11-29T18:00:00Z", "2026-11-29T18:00Z", "2026-11-29T18:00:00.5+05:30",
/// "…-0800" (the regex guarantees the shape). Sub-millisecond digits round up.
std::optional<std::int64_t> parse_iso8601(std::string_view s) noexcept {
    const std::int64_t year = parse_uint(s.substr(0, 4));
    const int month = two(s, 5), day = two(s, 8), hour = two(s, 11), minute = two(s, 14);
    std::size_t pos = 16;
    int second = 0;
    if (pos < s.size() && s[pos] == ':') {
        second = two(s, pos + 1);
        pos += 3;
    }
    std::int64_t frac_ms = 0;
    if (pos < s.size() && s[pos] == '.') {
        const std::size_t start = ++pos;
        while (pos < s.size() && is_digit(s[pos])) ++pos;
        frac_ms = scaled_ceil({}, s.substr(start, pos - start), 3);
    }
    auto t = civil_ms(year, month, day, hour, minute, second);
    if (!t || pos >= s.size()) return std::nullopt;
    if (s[pos] != 'Z' && s[pos] != 'z') {
        const int sign = s[pos] == '-' ? -1 : 1;
        const int oh = two(s, pos + 1);
        const int om = two(s, s[pos + 3] == ':' ? pos + 4 : pos + 3);
        if (oh > 23 || om > 59) return std::nullopt;
        *t -= sign * (oh * ms_per_hour + om * ms_per_minute);  // local = UTC + offset
    }
    return *t + frac_ms;
}

/// "2h 3m", "1 day 4 hours", "90s": the sum of the parts, saturating.
std::int64_t parse_duration_sum(std::string_view s) {
    const RE2& part = *detail::compiled().duration_part;
    re2::StringPiece input = detail::piece(s), number, unit;
    std::int64_t total = 0;
    while (RE2::FindAndConsume(&input, part, &number, &unit)) {
        std::int64_t scale = ms_per_second;
        switch (unit.empty() ? 's' : lower(unit[0])) {
            case 'd':
                scale = ms_per_day;
                break;
            case 'h':
                scale = ms_per_hour;
                break;
            case 'm':
                scale = ms_per_minute;
                break;
            default:
                break;
        }
        total = sat_add(total, sat_mul(parse_uint(detail::view(number)), scale));
    }
    return total;
}

/// The hint of one matched form, before clamping; nullopt when the capture is not a valid
/// value (e.g. "31 Feb"), in which case the next form is tried.
std::optional<std::int64_t> hint_value(hint_form form, std::string_view g1, std::string_view g2,
                                       std::int64_t now_ms) {
    switch (form) {
        case hint_form::milliseconds:
            return parse_uint(g1);
        case hint_form::seconds:
            return scaled_ceil(g1, 3);
        case hint_form::http_date: {
            const auto t = parse_http_date(g1);
            if (!t) return std::nullopt;
            return sat_sub(*t, now_ms);
        }
        case hint_form::reset_ms: {
            const auto n = parse_uint(g1);
            return n > 1'000'000'000'000 ? sat_sub(n, now_ms) : n;
        }
        case hint_form::reset_seconds: {
            const auto n = parse_uint(g1);
            const auto ms = sat_mul(n, ms_per_second);
            return n > 1'000'000'000 ? sat_sub(ms, now_ms) : ms;
        }
        case hint_form::number_with_unit: {
            const bool millis = g2.size() == 2 && lower(g2[0]) == 'm' && lower(g2[1]) == 's';
            return scaled_ceil(g1, millis ? 0 : 3);
        }
        case hint_form::duration_sum:
            return parse_duration_sum(g1);
        case hint_form::epoch_seconds:
            return sat_sub(sat_mul(parse_uint(g1), ms_per_second), now_ms);
        case hint_form::iso8601: {
            const auto t = parse_iso8601(g1);
            if (!t) return std::nullopt;
            return sat_sub(*t, now_ms);
        }
        case hint_form::none:
            break;
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> parse_retry_hint(std::string_view text, std::int64_t now_ms) {
    return detail::retry_hint(detail::match_result(text), text, now_ms);
}

std::optional<std::int64_t> detail::retry_hint(const match_result& m, std::string_view text,
                                               std::int64_t now_ms) {
    const auto table = pattern_table();
    const auto& res = detail::compiled().entries;
    const auto input = detail::piece(text);
    for (std::size_t i = 0; i < table.size(); ++i) {
        if (table[i].form == hint_form::none || !m.matches(i)) continue;
        const RE2& re = *res[i];
        std::array<re2::StringPiece, 3> groups;
        const int n = std::min<int>(1 + re.NumberOfCapturingGroups(), groups.size());
        if (!re.Match(input, 0, input.size(), RE2::UNANCHORED, groups.data(), n)) continue;
        if (auto v = hint_value(table[i].form, detail::view(groups[1]), detail::view(groups[2]),
                                now_ms)) {
            return std::max<std::int64_t>(*v, 0);
        }
    }
    return std::nullopt;
}

}  // namespace coagent
