#pragma once
// Time arithmetic shared by the HTTP providers, the classifier and the wait texts: int64
// milliseconds that saturate instead of overflowing, civil dates (no locale, no TZ, no timegm),
// HTTP-dates, and milliseconds shown as whole seconds.

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace coagent {

inline constexpr std::int64_t ms_per_second = 1000;
inline constexpr std::int64_t ms_per_minute = 60 * ms_per_second;
inline constexpr std::int64_t ms_per_hour = 60 * ms_per_minute;
inline constexpr std::int64_t ms_per_day = 24 * ms_per_hour;

/// a + b, a - b, a * b, saturating at the int64 limits instead of overflowing.
constexpr std::int64_t sat_add(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? std::numeric_limits<std::int64_t>::max()
                     : std::numeric_limits<std::int64_t>::min();
    return r;
}
constexpr std::int64_t sat_sub(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r = 0;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? std::numeric_limits<std::int64_t>::max()
                     : std::numeric_limits<std::int64_t>::min();
    return r;
}
constexpr std::int64_t sat_mul(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? std::numeric_limits<std::int64_t>::min()
                                  : std::numeric_limits<std::int64_t>::max();
    return r;
}

/// ceil(a / b) for a >= 0 and b > 0 (no overflow).
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
    return a / b + (a % b != 0);
}

/// A wait of `ms` milliseconds as the whole seconds shown to a person: rounded up, 0 for 0 or
/// less (2500 -> 3, 1 -> 1). format_wait (`<coagent/modes/wait_text.hpp>`) builds on it.
constexpr std::int64_t displayed_seconds(std::int64_t ms) noexcept {
    return ms <= 0 ? 0 : ceil_div(ms, ms_per_second);
}

constexpr bool is_leap_year(std::int64_t y) noexcept {
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/// The days of month m (1..12) of year y.
constexpr int days_in_month(std::int64_t y, int m) noexcept {
    constexpr int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap_year(y) ? 29 : days[m - 1];
}

/// Days since 1970-01-01 of the proleptic Gregorian date y-m-d (H. Hinnant's algorithm). Linear
/// in d: a day past the month's end lands in the next month.
constexpr std::int64_t days_from_civil(std::int64_t y, int m, int d) noexcept {
    y -= m <= 2 ? 1 : 0;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const std::int64_t yoe = y - era * 400;                          // [0, 399]
    const std::int64_t mp = m > 2 ? m - 3 : m + 9;                   // [0, 11]
    const std::int64_t doy = (153 * mp + 2) / 5 + d - 1;             // [0, 365]
    const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;  // [0, 146096]
    return era * 146097 + doe - 719468;
}

/// Which days of a month a date may name.
enum class day_check {
    calendar,  ///< the month's own days: "31 Feb" is not a date
    up_to_31,  ///< 1..31 in every month: "31 Feb" is 3 March (or 2 March in a leap year)
};

/// Epoch milliseconds of a UTC civil time; nullopt when a field is out of range. A leap second
/// (s == 60) is accepted and lands on the next minute.
std::optional<std::int64_t> civil_ms(std::int64_t y, int mo, int d, int h, int mi, int s,
                                     day_check days = day_check::calendar) noexcept;

/// An HTTP-date as epoch milliseconds: IMF-fixdate "Wed, 21 Oct 2026 07:28:00 GMT", also the
/// RFC 850 ("Wednesday, 21-Oct-26 07:28:00 GMT") and asctime ("Wed Oct 21 07:28:00 2026")
/// forms, month names and "GMT" in any case, blanks around it ignored; the weekday is not
/// checked against the date (as browsers' Date.parse does not either). nullopt if it is not
/// one.
std::optional<std::int64_t> parse_http_date(std::string_view s,
                                            day_check days = day_check::calendar) noexcept;

}  // namespace coagent
