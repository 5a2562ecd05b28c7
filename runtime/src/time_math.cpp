// HTTP-dates and civil times (see time_math.hpp).

#include <coagent/runtime/time_math.hpp>

#include <array>
#include <cctype>
#include <vector>

namespace coagent {

namespace {

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(2000, 3, 1) == 11017);
static_assert(days_from_civil(2026, 10, 21) == 20747);

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

std::optional<int> month_of(std::string_view m) noexcept {
    static constexpr std::array<std::string_view, 12> names{
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"};
    for (std::size_t i = 0; i < names.size(); ++i)
        if (iequals(m, names[i])) return static_cast<int>(i) + 1;
    return std::nullopt;
}

// 1 to 4 decimal digits
std::optional<int> digits(std::string_view s) noexcept {
    if (s.empty() || s.size() > 4) return std::nullopt;
    int v = 0;
    for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
        v = v * 10 + (c - '0');
    }
    return v;
}

std::vector<std::string_view> split_blanks(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        std::size_t j = i;
        while (j < s.size() && s[j] != ' ') ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// "08:49:37" on the given date
std::optional<std::int64_t> at_time(int year, std::optional<int> month, std::optional<int> day,
                                    std::string_view hms, day_check days) noexcept {
    if (!month || !day || hms.size() != 8 || hms[2] != ':' || hms[5] != ':') return std::nullopt;
    const auto h = digits(hms.substr(0, 2)), mi = digits(hms.substr(3, 2)),
               se = digits(hms.substr(6, 2));
    if (!h || !mi || !se) return std::nullopt;
    return civil_ms(year, *month, *day, *h, *mi, *se, days);
}

}  // namespace

std::optional<std::int64_t> civil_ms(std::int64_t y, int mo, int d, int h, int mi, int s,
                                     day_check days) noexcept {
    const int last =
        days == day_check::calendar ? (mo >= 1 && mo <= 12 ? days_in_month(y, mo) : 0) : 31;
    if (mo < 1 || mo > 12 || d < 1 || d > last) return std::nullopt;
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 60) return std::nullopt;
    return days_from_civil(y, mo, d) * ms_per_day + h * ms_per_hour + mi * ms_per_minute +
           s * ms_per_second;
}

std::optional<std::int64_t> parse_http_date(std::string_view s, day_check days) noexcept {
    const auto parts = split_blanks(trim(s));
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    if (parts.size() == 6 && parts[0].size() == 4 && parts[0].back() == ',' &&
        iequals(parts[5], "GMT")) {
        const auto year = digits(parts[3]);
        if (!year || parts[3].size() != 4) return std::nullopt;
        return at_time(*year, month_of(parts[2]), digits(parts[1]), parts[4], days);
    }
    // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
    if (parts.size() == 4 && parts[0].back() == ',' && iequals(parts[3], "GMT") &&
        parts[1].size() == 9 && parts[1][2] == '-' && parts[1][6] == '-') {
        const auto yy = digits(parts[1].substr(7, 2));
        if (!yy) return std::nullopt;
        return at_time(*yy < 70 ? 2000 + *yy : 1900 + *yy, month_of(parts[1].substr(3, 3)),
                       digits(parts[1].substr(0, 2)), parts[2], days);
    }
    // asctime: "Sun Nov  6 08:49:37 1994"
    if (parts.size() == 5) {
        const auto year = digits(parts[4]);
        if (!year || parts[4].size() != 4) return std::nullopt;
        return at_time(*year, month_of(parts[1]), digits(parts[2]), parts[3], days);
    }
    return std::nullopt;
}

}  // namespace coagent
