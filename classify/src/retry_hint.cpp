// Retry hints in error texts (policy Appendix A): the forms of the "hint" table, tried in
// order. Dates are converted by hand with civil-date arithmetic (no locale, no TZ, no timegm);
// every number saturates at int64 limits instead of overflowing.

#include <coagent/classify/classify.hpp>
#include <coagent/classify/patterns.hpp>

#include "compiled.hpp"

#include <algorithm>
#include <array>

namespace coagent {
namespace {

using detail::sat_add;
using detail::sat_mul;
using detail::sat_sub;

constexpr std::int64_t ms_per_second = 1000;
constexpr std::int64_t ms_per_minute = 60 * ms_per_second;
constexpr std::int64_t ms_per_hour = 60 * ms_per_minute;
constexpr std::int64_t ms_per_day = 24 * ms_per_hour;

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

// ---- civil-date arithmetic (proleptic Gregorian, H. Hinnant's days_from_civil) ------------

constexpr bool is_leap(std::int64_t y) noexcept {
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

constexpr int days_in_month(std::int64_t y, int m) noexcept {
    constexpr std::array<int, 12> days{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[static_cast<std::size_t>(m - 1)];
}

/// Days since 1970-01-01 of y-m-d.
constexpr std::int64_t days_from_civil(std::int64_t y, int m, int d) noexcept {
    y -= m <= 2 ? 1 : 0;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const std::int64_t yoe = y - era * 400;                          // [0, 399]
    const std::int64_t mp = m > 2 ? m - 3 : m + 9;                   // [0, 11]
    const std::int64_t doy = (153 * mp + 2) / 5 + d - 1;             // [0, 365]
    const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;  // [0, 146096]
    return era * 146097 + doe - 719468;
}
static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(2000, 3, 1) == 11017);
static_assert(days_from_civil(2026, 10, 21) == 20747);

/// Epoch milliseconds of a UTC civil time; nullopt when a field is out of range. A leap
/// second (ss == 60) is accepted and lands on the next minute.
std::optional<std::int64_t> civil_ms(std::int64_t y, int mo, int d, int h, int mi, int s) noexcept {
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo)) return std::nullopt;
    if (h > 23 || mi > 59 || s > 60) return std::nullopt;
    return days_from_civil(y, mo, d) * ms_per_day + h * ms_per_hour + mi * ms_per_minute +
           s * ms_per_second;
}

int two(std::string_view s, std::size_t pos) noexcept {
    return (s[pos] - '0') * 10 + (s[pos + 1] - '0');
}

/// "Wed, 21 Oct 2026 07:28:00 GMT" (the regex guarantees the shape). The weekday is not
/// checked against the date, as browsers' Date.parse does not either.
std::optional<std::int64_t> parse_http_date(std::string_view s) noexcept {
    static constexpr std::array<std::string_view, 12> months{
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"};
    std::string_view rest = s.substr(5);  // after "Www, "
    const std::size_t day_len = rest[1] == ' ' ? 1 : 2;
    const int day = day_len == 1 ? rest[0] - '0' : two(rest, 0);
    rest = rest.substr(day_len + 1);  // "Oct 2026 07:28:00 GMT"
    const std::array<char, 3> mon{lower(rest[0]), lower(rest[1]), lower(rest[2])};
    int month = 0;
    for (std::size_t i = 0; i < months.size(); ++i) {
        if (std::string_view(mon.data(), 3) == months[i]) month = static_cast<int>(i) + 1;
    }
    if (month == 0) return std::nullopt;
    const std::int64_t year = parse_uint(rest.substr(4, 4));
    return civil_ms(year, month, day, two(rest, 9), two(rest, 12), two(rest, 15));
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
