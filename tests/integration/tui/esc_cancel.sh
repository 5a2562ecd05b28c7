#!/usr/bin/env bash
# Esc while the retry loader shows: "Retry failed after 1 attempts: Retry cancelled", no further
# request reaches the provider, and the input works again.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":3000}}'
start_coagent '[{"error":"503 Service Unavailable","status":503},{"text":"The second prompt works."}]'

type_line "first"
wait_for "Retrying (1/3) in 3s… (esc to cancel)"
T send-keys -t main Escape
wait_for "Retry failed after 1 attempts: Retry cancelled"
wait_gone "Retrying"
wait_for "enter: send"
expect [ "$(requests)" = 1 ]
# the cancelled backoff was 3 s: well past it, still no retry request
sleep 3.5
expect [ "$(requests)" = 1 ]

type_line "again"
wait_for "The second prompt works."
expect [ "$(requests)" = 2 ]
# the retried error never goes back to the model: user, user
expect grep -q '"messages":\[{"role":"user","text":"first"},{"role":"user","text":"again"}\]' "$work/faux.log"
finish 0
