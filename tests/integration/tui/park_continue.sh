#!/usr/bin/env bash
# Leaving the terminal UI while a prompt is parked (Ctrl+D) does not cancel the park: it stays
# open in the session file, and `coagent --continue` shows the park line again at once and
# resumes by itself at the park's until (issue 20: a 3 s park, retry.maxDelayMs 1000).
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"maxDelayMs":1000,"longWait":"park"}}'
limit='{"error":"429 You have reached your usage limit for this period retry-after-ms=3000","status":429}'
COAGENT_ARGS="--session-dir $work/sessions" start_coagent "[$limit]"
type_line "first"
wait_for "Usage limit (quota): resumes at "
T send-keys -t main C-d
wait_for "EXIT=0"
file=$(ls "$work"/sessions/*.jsonl)
expect grep -q '"type":"retry_park"' "$file"
expect [ "$(grep -c '"type":"retry_park_end"' "$file")" = 0 ]
expect [ "$(grep -c '"type":"retry_end"' "$file")" = 0 ]
stop_coagent

# a new process continues the session: the park line without a prompt, then the reply by itself
COAGENT_ARGS="--session-dir $work/sessions --continue" START_TEXT="Usage limit (quota): resumes at " \
  start_coagent '[{"text":"Resumed after the park."}]'
expect screen_has "enter: retry now · esc: cancel"
wait_for "Resumed after the park." 15
wait_gone "Usage limit (quota)"
expect [ "$(grep -c '"outcome":"resumed"' "$file")" = 1 ]
finish 0
