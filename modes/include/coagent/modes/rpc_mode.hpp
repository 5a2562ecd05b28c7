#pragma once
// `coagent --mode rpc`: serves one agent session over JSON lines on stdin/stdout
// (docs/rpc.md). Single-threaded: stdin, stdout, signals and the session share the
// app_context's io_context.

#include <coagent/modes/app.hpp>

namespace coagent {

/// Runs RPC mode until stdin ends (exit code 0) or SIGTERM / SIGINT arrives (143 / 130):
/// a pending retry is cancelled (its auto_retry_end is still written), the stream in flight
/// is aborted, the prompt's last events and every queued line are written, then it returns.
/// Writes `{"type":"ready"}` first; logs go to stderr only. Ignores SIGPIPE (a closed stdout
/// is a write error, handled like stdin EOF).
int run_rpc_mode(app_context& app);

}  // namespace coagent
