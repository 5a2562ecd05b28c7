#!/usr/bin/env bash
# Retries run out: the failure line carries the last error, once, and no other error line.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":1000,"maxRetries":2}}'
start_coagent '[{"error":"503 first failure","status":503},{"error":"502 second failure","status":502},{"error":"429 Too Many Requests: the last one","status":429}]'

type_line "hi"
wait_for "Retrying (1/2) in 1s… (esc to cancel)"
wait_for "Retrying (2/2) in 2s… (esc to cancel)"
wait_for "Retry failed after 2 attempts: 429 Too Many Requests: the last one"
wait_for "enter: send"
expect [ "$(everything | grep -c 'Retry failed')" = 1 ]
expect_not_in_screen "Error:"
expect [ "$(requests)" = 3 ]
finish 0
