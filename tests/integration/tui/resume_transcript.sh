#!/usr/bin/env bash
# Issue 21: a reply cut mid-stream stays in the scrollback and one marker line says it is
# discarded; after --continue the transcript is drawn as it was live (the failed attempt, the
# marker, the Error and Retry failed lines), row for row.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":500,"maxRetries":1},"provider":{"streamIdleTimeoutMs":700}}'
words=$(printf 'abcde %.0s' $(seq 1 400))
words=${words% }
marker="↻ connection lost after 1.2k chars — retrying; the partial reply above is discarded"
COAGENT_ARGS="--session-dir $work/sessions" start_coagent \
  '[{"text":"'"$words"'","stallMs":5000},{"text":"Complete answer."},{"error":"400 bad request","status":400},{"error":"503 overloaded","status":503,"times":2}]'

type_line "long answer"
wait_for "$marker"
wait_for "Complete answer."
type_line "fail"
wait_for "Error: 400 bad request"
type_line "exhaust"
wait_for "Retry failed after 1 attempts: 503 overloaded"
wait_for "enter: send"
expect [ "$(everything | grep -cF -- "$marker")" = 1 ]
expect [ "$(everything | grep -c "abcde abcde")" -ge 12 ]  # the partial reply is still there
# the transcript rows, from the first prompt to the last line it printed
transcript() { everything | sed -n '/^> long answer/,/^Retry failed after 1 attempts/p'; }
live=$(transcript)
expect [ -n "$live" ]
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent

COAGENT_ARGS="--continue --session-dir $work/sessions" start_coagent '[]' 100 60
wait_for "Retry failed after 1 attempts: 503 overloaded"
resumed=$(transcript)
if [ "$resumed" != "$live" ]; then
  diff <(echo "$live") <(echo "$resumed") >&2
  fail "the resumed transcript differs from the live one"
fi
expect [ "$(everything | grep -cF -- "$marker")" = 1 ]
expect [ "$(everything | grep -c 'Error: 400 bad request')" = 1 ]
finish 0
