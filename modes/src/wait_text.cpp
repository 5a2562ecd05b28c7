#include <coagent/modes/wait_text.hpp>
#include <coagent/runtime/time_math.hpp>

#include <algorithm>

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

}  // namespace coagent
