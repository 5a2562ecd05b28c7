#pragma once
// How a wait is shown to a person (the terminal loader, print mode's retry line, status lines):
// one formatting function, docs/tui.md "Wait times".

#include <coagent/runtime/limit.hpp>

#include <cstdint>
#include <string>

namespace coagent {

/// A wait of `ms` milliseconds, rounded up: under 1 s in tenths (`0.3s`; 1 ms is `0.1s`), then
/// whole seconds up to 59 s (`2s`), then two units with the smaller one rounded up (`1m 5s`,
/// `2h 3m`, `3d 4h`). 0 or less is `0s`. Saturating: any int64 gives a finite text.
std::string format_wait(std::int64_t ms);

/// Time spent so far (the working spinner), rounded down: `0s`, `59s`, `1m 5s`, `2h 3m`.
std::string format_elapsed(std::int64_t ms);

/// For a countdown showing format_wait(ms_left): the wait left (in ms, < ms_left) at which the
/// text changes next; 0 when it changes only at the end.
std::int64_t next_wait_change(std::int64_t ms_left);

/// A time of day for a person, in the local time zone: `18:00` when `epoch_ms` falls on the
/// same local day as `now_ms`, else `2026-12-04 18:00`.
std::string format_clock_time(std::int64_t epoch_ms, std::int64_t now_ms);

/// The terminal UI's line while a prompt is parked (retry.longWait "park", docs/tui.md):
/// `Usage limit (quota): resumes at 18:00 (in 2h 3m) · enter: retry now · esc: cancel`.
std::string park_line(limit_kind limit, std::int64_t until_ms, std::int64_t left_ms,
                      std::int64_t now_ms);
/// Print mode's line when a prompt parks: `Usage limit (quota): resumes at 18:00 (in 2h 0m) —
/// <error>` (the error sanitised by the caller).
std::string park_print_line(limit_kind limit, std::int64_t until_ms, std::int64_t left_ms,
                            std::int64_t now_ms, const std::string& error);

}  // namespace coagent
