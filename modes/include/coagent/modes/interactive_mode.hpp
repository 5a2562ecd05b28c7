#pragma once
// Interactive mode (`coagent` on a terminal): a chat with a scrolling transcript, streamed
// replies, an input editor (libedit) at the bottom and a status line; the retry loader and the
// Esc handler follow policy §6 (see tui_controller.hpp and docs/tui.md).

#include <coagent/modes/app.hpp>

namespace coagent {

/// Runs the terminal UI on app.io() until the user leaves (Ctrl+C twice, Ctrl+D on an empty
/// input, end of input) or a SIGTERM / SIGHUP / SIGINT arrives. stdin and stdout must be
/// terminals. Restores the terminal on every way out. Returns the process exit code: 0, or
/// 128 + the signal. Throws config_error when the session or the line editor cannot be set up.
int run_interactive_mode(app_context& app);

}  // namespace coagent
