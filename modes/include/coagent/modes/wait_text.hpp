#pragma once
// How a wait is shown to a person (the terminal loader, print mode's retry line, status lines):
// one formatting function, docs/tui.md "Wait times".

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

}  // namespace coagent
