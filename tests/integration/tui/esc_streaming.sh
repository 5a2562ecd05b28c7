#!/usr/bin/env bash
# Esc while a reply streams aborts it: the part received stays, "Aborted", nothing more arrives,
# and the next prompt runs.
source "$(dirname "$0")/lib.sh" "$1"
start_coagent '[{"text":"alpha beta gamma delta epsilon zeta","stallMs":60000},{"text":"Next reply."}]'

type_line "stream please"
wait_for "alpha beta gamma"
wait_for "Working…"
T send-keys -t main Escape
wait_for "Aborted"
wait_gone "Working…"
wait_for "enter: send"
expect_not_in_screen "delta epsilon"
expect [ "$(requests)" = 1 ]

type_line "next"
wait_for "Next reply."
expect [ "$(requests)" = 2 ]
finish 0
