#!/usr/bin/env bash
# retry.longWait "park" in the terminal UI (issue 20): a usage limit whose reset is 90 s away
# (above retry.maxDelayMs 1000) shows the park line `Usage limit (quota): resumes at HH:MM (in 1m
# 30s) · enter: retry now · esc: cancel` with a live countdown; Enter ends the park at once (the
# next request goes out, the reply arrives); a second park is cancelled with Esc (`Retry failed
# after 1 attempts: Retry cancelled`, no further request).
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"maxDelayMs":1000,"longWait":"park"}}'
limit='{"error":"429 You have reached your usage limit for this period retry-after-ms=90000","status":429}'
start_coagent "[$limit,{\"text\":\"Resumed at once.\"},$limit,{\"text\":\"never sent\"}]"

type_line "first"
wait_for "Usage limit (quota): resumes at "
expect screen_has "(in 1m 30s) · enter: retry now · esc: cancel"
line=$(screen | grep -F "Usage limit (quota)")
expect grep -qE 'resumes at [0-9]{2}:[0-9]{2} \(in 1m 30s\)' <<<"$line"
# the countdown is live: a second later it says 1m 29s (or less)
wait_for "(in 1m 29s) · enter: retry now · esc: cancel" 5
expect_not_in_screen "Retrying ("
expect [ "$(requests)" = 1 ]
T send-keys -t main Enter
wait_for "Resumed at once."
wait_gone "Usage limit (quota)"
expect [ "$(requests)" = 2 ]

type_line "second"
wait_for "Usage limit (quota): resumes at "
T send-keys -t main Escape
wait_for "Retry failed after 1 attempts: Retry cancelled"
wait_gone "Usage limit (quota)"
wait_for "enter: send"
expect [ "$(requests)" = 3 ]
finish 0
