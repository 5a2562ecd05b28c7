#!/usr/bin/env bash
# retry.longWait "park" with real processes (issue 20): coagent talks to coagent-fakellm (a real
# HTTP server on a free port, through models.json), whose first answer is a usage limit with
# `retry-after-ms: 4000` — above retry.maxDelayMs 1000, so the prompt parks for 4 s.
#  1. park → kill -9 → `coagent --mode rpc --continue` re-enters the open park (get_state has
#     parkedUntil), sends nothing before `until`, then resumes with a prompt's events and no
#     prompt command; the session file closes the park (retry_park_end resumed).
#  2. stdin EOF while parked: the process exits 0 without cancelling the park (no auto_retry_end,
#     no retry_park_end); `coagent --continue -p` then re-enters it (one line when parking, one
#     when resuming) and runs its message after it.
#  3. SIGTERM while `coagent -p` is parked: exit 143, the park stays open.
#  4. `coagent --mode rpc --continue` re-enters that park; abort_retry cancels it as a live one.
# Usage: park.sh <path to coagent> <path to coagent-fakellm>
set -uo pipefail
exec </dev/null  # an inherited stdin would join the prompt
COAGENT=$(realpath "$1")
FAKELLM=$(realpath "$2")
source "$(dirname "$0")/../checks.sh"  # check, wait_for, free_port, start_redis, …
work=$(mktemp -d)
fake_pid=""
cleanup() {
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null
  [ -n "${rpc_pid:-}" ] && kill -9 "$rpc_pid" 2>/dev/null
  [ -n "${feeder:-}" ] && kill "$feeder" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

types() { jq -r 'select(.type != "message_update") | .type' "$1" | tr '\n' ' '; }

limit='{"status":429,"headers":{"retry-after-ms":"4000"},"body":{"error":{"message":"You have reached your usage limit for this period"}}}'
cat >"$work/script.json" <<EOF
[$limit,{"text":"back after the reset"},$limit,{"text":"second"},{"text":"third"},$limit]
EOF
"$FAKELLM" --port 0 --script "$work/script.json" --log "$work/fake.log" >"$work/fake.out" 2>&1 &
fake_pid=$!
wait_for "$work/fake.out" listening 10 || { echo "fakellm did not start" >&2; exit 1; }
port=$(sed -n 's/^listening 127.0.0.1:\([0-9]*\)$/\1/p' "$work/fake.out")

export COAGENT_DIR="$work/home"
mkdir -p "$COAGENT_DIR" "$work/project"
echo '{"retry":{"maxDelayMs":1000,"longWait":"park"}}' >"$COAGENT_DIR/settings.json"
cat >"$COAGENT_DIR/models.json" <<EOF
{"providers":{"local":{"baseUrl":"http://127.0.0.1:$port/v1","api":"openai-completions",
  "apiKey":"any","models":[{"id":"m1","contextWindow":32000,"maxTokens":4096}]}}}
EOF
cd "$work/project"
model=(--provider local --model m1)
requests() { [ -f "$work/fake.log" ] && wc -l <"$work/fake.log" || echo 0; }

# ---- 1. park, kill -9, --continue ------------------------------------------------------------
mkfifo "$work/in1"
"$COAGENT" "${model[@]}" --mode rpc <"$work/in1" >"$work/ev1.jsonl" 2>"$work/err1.txt" &
rpc_pid=$!
(echo '{"id":"p","type":"prompt","message":"hi"}'; sleep 60) >"$work/in1" &
feeder=$!
check "the prompt parks" wait_for "$work/ev1.jsonl" '"type":"retry_parked"' 10
until=$(jq -r 'select(.type=="retry_parked") | .until' "$work/ev1.jsonl")
kill -9 "$rpc_pid"; wait "$rpc_pid" 2>/dev/null; rpc_pid=""
kill "$feeder" 2>/dev/null; wait "$feeder" 2>/dev/null; feeder=""
check "parking: agent_end{willRetry:true}, auto_retry_start{delayMs 4000, limit quota}, retry_parked" \
  test "$(jq -c 'select(.type=="agent_end" or .type=="auto_retry_start" or .type=="retry_parked") | [.type, .willRetry, .delayMs, .limit, .attempt]' "$work/ev1.jsonl" | tr '\n' ' ')" \
  = '["agent_end",true,null,null,null] ["auto_retry_start",null,4000,"quota",1] ["retry_parked",null,null,"quota",null] '
check "retry_parked carries the error" \
  test "$(jq -r 'select(.type=="retry_parked") | .errorMessage' "$work/ev1.jsonl")" = "429 You have reached your usage limit for this period retry-after-ms=4000"
file=$(ls "$COAGENT_DIR"/sessions/*/*.jsonl 2>/dev/null | head -1)
[ -n "$file" ] || file=$(find "$COAGENT_DIR" -name '*.jsonl' | head -1)
check "the session file holds the open park" test "$(jq -r 'select(.type=="retry_park") | "\(.until) \(.attempt) \(.limit)"' "$file")" = "$until 1 quota"
check "no retry_park_end after a kill" test "$(count "$file" '"retry_park_end"')" = 0

mkfifo "$work/in2"
"$COAGENT" "${model[@]}" --mode rpc --continue <"$work/in2" >"$work/ev2.jsonl" 2>"$work/err2.txt" &
rpc_pid=$!
(echo '{"id":"s","type":"get_state"}'; sleep 60) >"$work/in2" &
feeder=$!
check "--continue answers get_state with parkedUntil" wait_for "$work/ev2.jsonl" '"command":"get_state"' 10
check "parkedUntil is the park's until" test "$(jq -r 'select(.command=="get_state") | .data.parkedUntil' "$work/ev2.jsonl")" = "$until"
# nothing is sent before until: half a second before it, the fakellm has seen one request only
left=$(( until - $(now_ms) - 500 ))
[ "$left" -gt 0 ] && sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"
check "no request before until" test "$(requests)" = 1
check "the resumed turn settles by itself" wait_for "$work/ev2.jsonl" '"type":"agent_settled"' 15
check "after until" test "$(now_ms)" -ge "$until"
check "the resumed events: a prompt's, without a prompt command" \
  test "$(types "$work/ev2.jsonl")" = "ready retry_parked response agent_start turn_start message_start message_end auto_retry_end turn_end agent_end agent_settled "
check "the retry chain ends with success at attempt 1" \
  test "$(jq -c 'select(.type=="auto_retry_end") | [.success, .attempt]' "$work/ev2.jsonl")" = "[true,1]"
check "the reply" contains "$work/ev2.jsonl" 'back after the reset'
check "two requests in all" test "$(requests)" = 2
check "the second request does not carry the error" \
  test "$(sed -n 2p "$work/fake.log" | jq -c '.roles | map(select(. != "system"))')" = '["user"]'
check "the park is closed in the file" test "$(jq -r 'select(.type=="retry_park_end") | .outcome' "$file")" = resumed
kill "$feeder" 2>/dev/null; wait "$feeder" 2>/dev/null; feeder=""
wait "$rpc_pid"; code=$?; rpc_pid=""
check "exit 0 at EOF after the resumed turn ($code)" test "$code" = 0

# ---- 2. EOF while parked, then --continue -p ---------------------------------------------------
rm -rf "$COAGENT_DIR/sessions"
mkfifo "$work/in3"
"$COAGENT" "${model[@]}" --mode rpc <"$work/in3" >"$work/ev3.jsonl" 2>"$work/err3.txt" &
rpc_pid=$!
exec 4>"$work/in3"
echo '{"id":"p","type":"prompt","message":"again"}' >&4
check "the second prompt parks" wait_for "$work/ev3.jsonl" '"type":"retry_parked"' 10
exec 4>&-  # stdin EOF
deadline=$((SECONDS + 5))
while kill -0 "$rpc_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.02; done
check "EOF while parked: the process exits at once" bash -c "! kill -0 $rpc_pid 2>/dev/null"
wait "$rpc_pid"; code=$?; rpc_pid=""
check "exit 0 ($code)" test "$code" = 0
check "EOF does not cancel the park: no auto_retry_end" test "$(count "$work/ev3.jsonl" auto_retry_end)" = 0
file=$(find "$COAGENT_DIR" -name '*.jsonl' | head -1)
check "the park stays open in the file" test "$(count "$file" '"retry_park_end"')" = 0
check "and no retry_end" test "$(count "$file" '"retry_end"')" = 0

"$COAGENT" "${model[@]}" --continue -p "and now?" >"$work/out4.txt" 2>"$work/err4.txt"
code=$?
check "--continue -p: exit 0 ($code)" test "$code" = 0
check "one line when parking" test "$(grep -c '^Usage limit (quota): resumes at [0-9][0-9]:[0-9][0-9] (in [0-9.]*s) — 429 You have reached your usage limit' "$work/err4.txt")" = 1
check "one line when resuming" test "$(grep -c '^Resuming after the usage limit (quota)…$' "$work/err4.txt")" = 1
check "no Retrying line for the park" test "$(count "$work/err4.txt" Retrying)" = 0
check "the park's reply, then the message's" test "$(tr '\n' ' ' <"$work/out4.txt")" = "second third "
check "five requests in all" test "$(requests)" = 5
check "the park is closed" test "$(jq -r 'select(.type=="retry_park_end") | .outcome' "$file")" = resumed

# ---- 3. SIGTERM while print mode is parked ------------------------------------------------------
rm -rf "$COAGENT_DIR/sessions"
"$COAGENT" "${model[@]}" -p "parks" >"$work/out5.txt" 2>"$work/err5.txt" &
pid5=$!
check "print mode parks" wait_for "$work/err5.txt" "Usage limit (quota): resumes at" 10
kill -TERM "$pid5"
wait "$pid5"; code=$?
check "SIGTERM while parked: exit 143 ($code)" test "$code" = 143
file=$(find "$COAGENT_DIR" -name '*.jsonl' | head -1)
check "SIGTERM leaves the park open" test "$(count "$file" '"retry_park_end"')" = 0
check "SIGTERM writes no retry_end" test "$(count "$file" '"retry_end"')" = 0
check "SIGTERM: no failure line" test "$(count "$work/err5.txt" 'Retry failed')" = 0

# ---- 4. abort_retry cancels a park re-entered by --continue (§11.39) ----------------------------
mkfifo "$work/in6"
"$COAGENT" "${model[@]}" --mode rpc --continue <"$work/in6" >"$work/ev6.jsonl" 2>"$work/err6.txt" &
rpc_pid=$!
exec 4>"$work/in6"
check "--continue re-enters the park left by SIGTERM" wait_for "$work/ev6.jsonl" '"type":"retry_parked"' 10
echo '{"id":"a","type":"abort_retry"}' >&4
check "abort_retry: the re-entered park settles" wait_for "$work/ev6.jsonl" '"type":"agent_settled"' 10
check "abort_retry on a re-entered park: the events of a cancelled live park" \
  test "$(types "$work/ev6.jsonl")" = "ready retry_parked response auto_retry_end agent_settled "
check "abort_retry: Retry cancelled" \
  test "$(jq -c 'select(.type=="auto_retry_end") | [.success, .finalError]' "$work/ev6.jsonl")" = '[false,"Retry cancelled"]'
check "abort_retry: the park is closed cancelled" \
  test "$(jq -r 'select(.type=="retry_park_end") | .outcome' "$file")" = cancelled
check "abort_retry: no request sent" test "$(requests)" = 6
exec 4>&-
wait "$rpc_pid"; code=$?; rpc_pid=""
check "exit 0 at EOF after the cancel ($code)" test "$code" = 0

echo "park: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  for f in err1.txt err2.txt err3.txt err4.txt ev2.jsonl; do echo "--- $f" >&2; cat "$work/$f" >&2; done
  exit 1
fi
