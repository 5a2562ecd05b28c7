#!/usr/bin/env bash
# Park probes shared through Redis (issue 20, docs/retry-policy.md §11.27, §11.37): three coagent
# processes (--mode rpc, each with its own COAGENT_DIR, as on three machines) share one
# redis-server (started here on a free port, never the system one) and one coagent-fakellm whose
# first three answers are a usage limit with `retry-after-ms: 3000` (above retry.maxDelayMs 1000):
# all three park on the same account. Each process has its own API key, so the fakellm log
# (keySuffix) says who sent what.
#  1. at the wake exactly one probe reaches fakellm (its reply is slow: every process is awake
#     meanwhile and sends nothing); on its success all three continue, six requests in all.
#  2. the probe meets the limit again: all three park again until the new reset (four requests),
#     then one probe, then all continue.
#  3. the probing process is kill -9'd: its claim lapses, another process takes it over, then the
#     third continues.
# Usage: park_redis.sh <path to coagent> <path to coagent-fakellm>
set -uo pipefail
exec </dev/null  # an inherited stdin would join the prompt
COAGENT=$(realpath "$1")
FAKELLM=$(realpath "$2")
source "$(dirname "$0")/../checks.sh"  # check, wait_for, free_port, start_redis, …
work=$(mktemp -d)
fake_pid=""
pids=()
feeders=()
cleanup() {
  for p in "${pids[@]}" "${feeders[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

sleep_until() {  # sleep_until EPOCH-MS
  local left=$(( $1 - $(now_ms) ))
  [ "$left" -gt 0 ] && sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"
  return 0
}

port=$(free_port)
start_redis

limit() {  # limit MS: a usage limit that resets in MS
  echo '{"status":429,"headers":{"retry-after-ms":"'$1'"},"body":{"error":{"message":"You have reached your usage limit for this period"}}}'
}
start_fake() {  # start_fake NAME SCRIPT-JSON
  [ -n "$fake_pid" ] && { kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null; }
  "$FAKELLM" --port 0 --script "$2" --log "$work/$1.log" >"$work/$1.out" 2>&1 &
  fake_pid=$!
  wait_for "$work/$1.out" listening 10 || { echo "fakellm did not start" >&2; exit 1; }
  llm_port=$(sed -n 's/^listening 127.0.0.1:\([0-9]*\)$/\1/p' "$work/$1.out")
  llm_log="$work/$1.log"
}
requests() { [ -f "$llm_log" ] && grep -c . "$llm_log" || echo 0; }
suffix_of() { sed -n "${1}p" "$llm_log" | jq -r .keySuffix; }
keys=(none KEY1 KEY2 KEY3)
# start_fleet NAME: processes NAME1..3, each its own COAGENT_DIR and key, a prompt each
start_fleet() {
  pids=()
  feeders=()
  for i in 1 2 3; do
    local d="$work/$1$i"
    mkdir -p "$d/home" "$d/project"
    echo '{"retry":{"maxDelayMs":1000,"longWait":"park"},"limits":{"store":"redis","redisUrl":"redis://127.0.0.1:'$port'/0"}}' >"$d/home/settings.json"
    echo '{"providers":{"local":{"baseUrl":"http://127.0.0.1:'$llm_port'/v1","api":"openai-completions","apiKey":"sk-test-'${keys[$i]}'","models":[{"id":"m1","contextWindow":32000,"maxTokens":4096}]}}}' >"$d/home/models.json"
    mkfifo "$d/in"
    (cd "$d/project" && COAGENT_DIR="$d/home" exec "$COAGENT" --provider local --model m1 --mode rpc \
      <"$d/in" >"$d/ev.jsonl" 2>"$d/err.txt") &
    pids+=($!)
    (echo '{"id":"p","type":"prompt","message":"hi '$i'"}'; exec sleep 120) >"$d/in" &
    feeders+=($!)
  done
}
stop_fleet() {
  for p in "${feeders[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
  feeders=()
}
ev() { echo "$work/$1/ev.jsonl"; }
parks() { jq -r 'select(.type=="retry_parked") | .until' "$(ev "$1")" | tr '\n' ' '; }
max_until() {  # the latest first park of a fleet
  local m=0 u
  for i in 1 2 3; do
    u=$(jq -r 'select(.type=="retry_parked") | .until' "$(ev "$1$i")" | head -1)
    [ "$u" -gt "$m" ] && m=$u
  done
  echo "$m"
}
key_index() { for i in 1 2 3; do [ "${keys[$i]}" = "$1" ] && echo "$i"; done; }

# ---- 1. one probe, then all continue ------------------------------------------------------------
start_fake s1 "[$(limit 3000),$(limit 3000),$(limit 3000),{\"text\":\"probe ok\",\"delayMs\":6000},{\"text\":\"continued\",\"times\":2}]"
start_fleet a
for i in 1 2 3; do check "1: process $i parks" wait_for "$(ev a$i)" '"type":"retry_parked"' 15; done
check "1: three requests before the wake" test "$(requests)" = 3
top=$(max_until a)
check "1: the probe goes out at the wake" wait_count "$llm_log" '"request"' 4 15
# every process has woken (until + at most 300 ms of spread, + a poll) while the probe's reply
# takes 6 s: the others sent nothing
sleep_until $((top + 2000))
check "1: exactly one probe while it is in flight" test "$(requests)" = 4
prober=$(key_index "$(suffix_of 4)")
for i in 1 2 3; do check "1: process $i settles" wait_for "$(ev a$i)" '"type":"agent_settled"' 20; done
check "1: six requests in all" test "$(requests)" = 6
check "1: the continues come from the two others" \
  test "$(for n in 5 6; do suffix_of $n; done | sort | paste -sd' ')" = "$(for i in 1 2 3; do [ "$i" != "$prober" ] && echo "${keys[$i]}"; done | sort | paste -sd' ')"
for i in 1 2 3; do
  check "1: process $i: the chain ends with success at attempt 1" \
    test "$(jq -c 'select(.type=="auto_retry_end") | [.success, .attempt]' "$(ev a$i)")" = "[true,1]"
  check "1: process $i parked once" test "$(count "$(ev a$i)" '"type":"retry_parked"')" = 1
done
check "1: the prober's reply" grep -qF '"probe ok"' "$(ev a$prober)"
stop_fleet

# ---- 2. the probe meets the limit again: all stay parked until the new reset ----------------------
start_fake s2 "[$(limit 3000),$(limit 3000),$(limit 3000),$(limit 4000),{\"text\":\"after the second reset\",\"delayMs\":3000},{\"text\":\"continued\",\"times\":2}]"
start_fleet b
for i in 1 2 3; do check "2: process $i parks" wait_for "$(ev b$i)" '"type":"retry_parked"' 15; done
for i in 1 2 3; do check "2: process $i parks again" wait_count "$(ev b$i)" '"type":"retry_parked"' 2 20; done
check "2: one probe, then nothing: four requests" test "$(requests)" = 4
prober=$(key_index "$(suffix_of 4)")
until2=$(parks "b$prober" | cut -d' ' -f2)
check "2: the prober parks again at attempt 2" \
  test "$(jq -c 'select(.type=="auto_retry_start") | .attempt' "$(ev b$prober)" | paste -sd' ')" = "1 2"
for i in 1 2 3; do
  u=$(parks "b$i" | cut -d' ' -f2)
  first=$(parks "b$i" | cut -d' ' -f1)
  check "2: process $i: the new until is the probe's reset ($u ~ $until2)" \
    bash -c "[ $u -gt $first ] && [ \$(( $u - $until2 )) -le 1000 ] && [ \$(( $until2 - $u )) -le 1000 ]"
done
for i in 1 2 3; do check "2: process $i settles after the new reset" wait_for "$(ev b$i)" '"type":"agent_settled"' 25; done
check "2: seven requests in all (one probe at each reset)" test "$(requests)" = 7
for i in 1 2 3; do
  check "2: process $i: success" test "$(jq -c 'select(.type=="auto_retry_end") | .success' "$(ev b$i)")" = true
done
stop_fleet

# ---- 3. the prober is killed: another process takes the probe over --------------------------------
start_fake s3 "[$(limit 3000),$(limit 3000),$(limit 3000),{\"text\":\"never seen\",\"delayMs\":60000},{\"text\":\"took over\",\"delayMs\":1000},{\"text\":\"continued\"}]"
start_fleet c
for i in 1 2 3; do check "3: process $i parks" wait_for "$(ev c$i)" '"type":"retry_parked"' 15; done
check "3: the probe goes out" wait_count "$llm_log" '"request"' 4 15
victim=$(key_index "$(suffix_of 4)")
kill -9 "${pids[$((victim - 1))]}"
check "3: another process takes the probe over" wait_count "$llm_log" '"request"' 5 30
taker=$(key_index "$(suffix_of 5)")
check "3: the taker is not the killed process" test "$taker" != "$victim"
for i in 1 2 3; do
  [ "$i" = "$victim" ] && continue
  check "3: process $i settles" wait_for "$(ev c$i)" '"type":"agent_settled"' 20
  check "3: process $i: success" test "$(jq -c 'select(.type=="auto_retry_end") | .success' "$(ev c$i)")" = true
done
check "3: six requests in all" test "$(requests)" = 6
check "3: the third continues after the taker" \
  test "$(suffix_of 6)" != "$(suffix_of 5)" -a "$(suffix_of 6)" != "${keys[$victim]}"
stop_fleet

echo "park_redis: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  for f in "$work"/*/err.txt; do echo "--- $f" >&2; cat "$f" >&2; done
  for f in "$work"/s*.log; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
fi
