#!/usr/bin/env bash
# Two retryable errors, then success: the loader shows each attempt and counts down, the reply
# appears, no failure line, three requests.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":3000}}'
start_coagent '[{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2},{"text":"Hello after two retries."}]'

type_line "say hello"
wait_for "> say hello"
wait_for "Retrying (1/3) in 3s… (esc to cancel)"
wait_for "Retrying (1/3) in 2s… (esc to cancel)"
# (not "in 1s": under load a one-second frame can pass between two looks at the screen)
wait_for "Retrying (2/3) in 6s… (esc to cancel)" 10
wait_for "Retrying (2/3) in 5s… (esc to cancel)"
wait_for "Hello after two retries." 15
wait_gone "Retrying"
expect_not_in_screen "Retry failed"
expect_not_in_screen "Error:"
expect [ "$(requests)" = 3 ]
finish 0
