#!/usr/bin/env bash
# The working state and the footer (issue 23): an animated spinner with the seconds elapsed while
# a request runs; during a backoff the status line names the error's limit in words; the footer
# shows the model, tokens in/out, context use in % of the window, and the retries so far.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":2000}}'
start_coagent '[{"text":"Slow reply.","delayMs":2500},{"error":"429 Too Many Requests","status":429},{"text":"After the rate limit."}]'

# before any reply: the footer has the model and zero tokens
wait_for "faux/faux · 0 in · 0 out · 0% of 128k context"

type_line "go"
wait_for "Working… 1s"
expect [ "$(screen | grep -cE '^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] Working… 1s \(esc to interrupt\)$')" = 1 ]
# the frame moves: the row as it is now is gone within a second (a frame lasts 100 ms)
wait_gone "$(screen | grep -F 'Working…')" 1
wait_for "Working… 2s"
wait_for "Slow reply."
wait_gone "Working…"
# the footer: tokens in and out, context use
expect [ "$(screen | grep -cE '^faux/faux · [1-9][0-9.k]* in · [1-9][0-9.k]* out · [0-9]+% of 128k context$')" = 1 ]

# a rate limit: the loader counts down, the status line says it in words
type_line "again"
wait_for "Retrying (1/3) in"
wait_for "enter: retry now · esc: cancel the retry · rate limited · 429 Too Many Requests"
wait_for "After the rate limit." 15
wait_for "· 1 retry"
finish 0
