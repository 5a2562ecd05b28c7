#!/usr/bin/env bash
# Enter on an empty editor while the retry loader shows: the next attempt goes out at once,
# long before the 50 s backoff would have ended, and the reply arrives.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":50000}}'
start_coagent '[{"error":"503 Service Unavailable","status":503},{"text":"Retried at once."}]'

type_line "first"
wait_for "Retrying (1/3) in 5"
wait_for "enter: retry now · esc: cancel the retry"
expect [ "$(requests)" = 1 ]
T send-keys -t main Enter
wait_for "Retried at once."
wait_gone "Retrying"
expect [ "$(requests)" = 2 ]
finish 0
