#include <coagent/modes/wait_text.hpp>
#include <coagent/runtime/time_math.hpp>

#include <algorithm>
#include <ctime>

namespace coagent {

namespace {

// the largest wait (ms) of each form: tenths, seconds, minutes + seconds, hours + minutes
constexpr std::int64_t tenths_up_to = 900;
constexpr std::int64_t seconds_up_to = 59'000;
constexpr std::int64_t minutes_up_to = 3'599'000;
constexpr std::int64_t hours_up_to = 86'340'000;  // 23h 59m

std::string two_units(std::int64_t big, const char* big_unit, std::int64_t small,
                      const char* small_unit) {
    return std::to_string(big) + big_unit + " " + std::to_string(small) + small_unit;
}

}  // namespace

std::string format_wait(std::int64_t ms) {
    if (ms <= 0) return "0s";
    if (ms <= tenths_up_to) return "0." + std::to_string(ceil_div(ms, 100)) + "s";
    const std::int64_t s = displayed_seconds(ms);
    if (ms <= seconds_up_to) return std::to_string(s) + "s";
    if (ms <= minutes_up_to) return two_units(s / 60, "m", s % 60, "s");
    if (ms <= hours_up_to) {
        const std::int64_t m = ceil_div(ms, 60'000);
        return two_units(m / 60, "h", m % 60, "m");
    }
    const std::int64_t h = ceil_div(ms, 3'600'000);
    return two_units(h / 24, "d", h % 24, "h");
}

std::int64_t next_wait_change(std::int64_t ms_left) {
    if (ms_left <= 0) return 0;
    // within a form the text changes where ms_left crosses a multiple of its unit, and at the
    // form's lower end
    std::int64_t unit = 100, lower = 0;
    if (ms_left > hours_up_to) {
        unit = 3'600'000;
        lower = hours_up_to;
    } else if (ms_left > minutes_up_to) {
        unit = 60'000;
        lower = minutes_up_to;
    } else if (ms_left > seconds_up_to) {
        unit = 1000;
        lower = seconds_up_to;
    } else if (ms_left > tenths_up_to) {
        unit = 1000;
        lower = tenths_up_to;
    }
    return std::max((ceil_div(ms_left, unit) - 1) * unit, lower);
}

std::string format_elapsed(std::int64_t ms) {
    const std::int64_t s = ms <= 0 ? 0 : ms / 1000;
    if (s < 60) return std::to_string(s) + "s";
    if (s < 3600) return std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
    return std::to_string(s / 3600) + "h " + std::to_string(s / 60 % 60) + "m";
}

namespace {
std::tm local_tm(std::int64_t epoch_ms) {
    const std::time_t t = static_cast<std::time_t>(epoch_ms / 1000);
    std::tm tm{};
    ::localtime_r(&t, &tm);
    return tm;
}
std::string two_digits(int n) {
    return (n < 10 ? "0" : "") + std::to_string(n);
}
}  // namespace

std::string format_clock_time(std::int64_t epoch_ms, std::int64_t now_ms) {
    const std::tm at = local_tm(epoch_ms);
    const std::tm now = local_tm(now_ms);
    std::string hm = two_digits(at.tm_hour) + ":" + two_digits(at.tm_min);
    if (at.tm_year == now.tm_year && at.tm_yday == now.tm_yday) return hm;
    return std::to_string(at.tm_year + 1900) + "-" + two_digits(at.tm_mon + 1) + "-" +
           two_digits(at.tm_mday) + " " + hm;
}

std::string park_line(limit_kind limit, std::int64_t until_ms, std::int64_t left_ms,
                      std::int64_t now_ms) {
    return "Usage limit (" + std::string(to_string(limit)) + "): resumes at " +
           format_clock_time(until_ms, now_ms) + " (in " + format_wait(left_ms) +
           ") \u00b7 enter: retry now \u00b7 esc: cancel";
}

std::string park_print_line(limit_kind limit, std::int64_t until_ms, std::int64_t left_ms,
                            std::int64_t now_ms, const std::string& error) {
    return "Usage limit (" + std::string(to_string(limit)) + "): resumes at " +
           format_clock_time(until_ms, now_ms) + " (in " + format_wait(left_ms) + ") \u2014 " +
           error;
}

}  // namespace coagent
