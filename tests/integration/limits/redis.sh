#!/usr/bin/env bash
# limits.store "redis" with real processes and a real redis-server (issue 19): the test starts its
# own redis-server on a free port in a temporary directory (never the system one) and stops it.
# Each coagent process has its own COAGENT_DIR (as on separate machines).
# Usage: redis.sh <path to coagent> <path to coagent-fakellm>
set -uo pipefail
exec </dev/null  # an inherited stdin would join the prompt
COAGENT=$(realpath "$1")
FAKELLM=$(realpath "$2")
source "$(dirname "$0")/../checks.sh"  # check, wait_for, free_port, start_redis, …
work=$(mktemp -d)
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
  [ -n "${rpc_pid:-}" ] && kill "$rpc_pid" 2>/dev/null
  [ -n "${llm_pid:-}" ] && kill "$llm_pid" 2>/dev/null
  for p in ${procs_pids:-}; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

port=$(free_port)
rcli() { redis-cli -p "$port" "$@"; }
key='coagent:{limits}:budget'

home() {  # home NAME SETTINGS-JSON: a COAGENT_DIR of its own
  mkdir -p "$work/$1"
  echo "$2" >"$work/$1/settings.json"
}
shared='"limits":{"store":"redis","redisUrl":"redis://127.0.0.1:'$port'/0"}'
budget='"retry":{"baseDelayMs":1,"budget":{"enabled":true,"maxTokens":10}}'

start_redis

# ---- 1. the budget over 5 processes at a time, 50 prompts in all, during an outage ----------
# Every request fails (503). The first step waits 200 ms, so a process has read the shared level
# before its first decision. Bound: a process retries only while its copy of the bucket is above
# maxTokens/2 = 5, and each failure anywhere takes a token; a process can miss at most what the
# others did in the same moment, so with 5 processes running together the fleet makes at most
# 5 x (10/2 - 1) = 20 retries (without the budget: 50 x maxRetries = 150).
outage='[{"error":"503 Service Unavailable","status":503,"delayMs":200},{"error":"503 Service Unavailable","status":503,"times":9,"delayMs":20}]'
for i in 1 2 3 4 5; do home "b$i" "{$shared,$budget}"; done
for wave in $(seq 1 10); do
  pids=()
  for i in 1 2 3 4 5; do
    COAGENT_DIR="$work/b$i" "$COAGENT" --provider faux --mode json --no-session --faux-script "$outage" -p hi \
      >"$work/b-$wave-$i.jsonl" 2>"$work/b-$wave-$i.err" &
    pids+=($!)
  done
  wait "${pids[@]}"
done
retries=$(cat "$work"/b-*.jsonl | grep -c '"type":"auto_retry_start"')
ends=$(cat "$work"/b-*.jsonl | grep -c '"type":"auto_retry_end"')
refused=$(cat "$work"/b-*.jsonl | grep -c 'retry budget for faux exhausted')
echo "budget: 50 prompts over 5 processes at a time: $retries retries, $refused refused by the budget" >&2
check "budget: the fleet's retries stay within 5 x (maxTokens/2 - 1) = 20" [ "$retries" -le 20 ]
check "budget: at least one retry was made (the bucket started full)" [ "$retries" -ge 1 ]
check "budget: every prompt settles with exactly one auto_retry_end" [ "$ends" = 50 ]
each_one=1
for f in "$work"/b-*.jsonl; do [ "$(count "$f" '"type":"auto_retry_end"')" = 1 ] || each_one=0; done
check "budget: one auto_retry_end in each prompt" [ "$each_one" = 1 ]
check "budget: the level in Redis is at most half the bucket" [ "$(rcli hget "$key" faux)" -le 5000 ]
check "budget: no warning while Redis is up" bash -c "! cat $work/b-*.err | grep -q 'limits:'"

# the same outage without the budget: every prompt retries maxRetries times
home off "{$shared,\"retry\":{\"baseDelayMs\":1}}"
COAGENT_DIR="$work/off" "$COAGENT" --provider faux --mode json --no-session --faux-script "$outage" -p hi >off.jsonl 2>off.err
check "budget off: 3 retries, the spec's chain" [ "$(count off.jsonl '"type":"auto_retry_start"')" = 3 ]

# the same outage scripted on coagent-fakellm (a failFor window: every request in it gets a 503),
# the processes on an HTTP provider: the same bound, one auto_retry_end per prompt
rcli del "$key" >/dev/null
"$FAKELLM" --port 0 --log "$work/out.log" --script '[{"failFor":{"ms":600000,"status":503,"body":"Service Unavailable"},"delayMs":200}]' >outage.out 2>outage.err &
llm_pid=$!
wait_for outage.out listening
llm_port=$(head -1 outage.out | sed 's/.*://')
for i in 1 2 3 4 5; do
  home "h$i" "{$shared,$budget}"
  echo '{"providers":{"fake":{"baseUrl":"http://127.0.0.1:'$llm_port'/v1","api":"openai-completions","apiKey":"sk-test-OUT1","models":[{"id":"m1"}]}}}' >"$work/h$i/models.json"
done
for wave in $(seq 1 10); do
  pids=()
  for i in 1 2 3 4 5; do
    COAGENT_DIR="$work/h$i" "$COAGENT" --provider fake --model m1 --mode json --no-session -p hi \
      >"$work/h-$wave-$i.jsonl" 2>"$work/h-$wave-$i.err" &
    pids+=($!)
  done
  wait "${pids[@]}"
done
kill "$llm_pid"; wait "$llm_pid" 2>/dev/null; llm_pid=""
hretries=$(cat "$work"/h-*.jsonl | grep -c '"type":"auto_retry_start"')
hrequests=$(grep -c . "$work/out.log")
echo "budget over fakellm failFor: 50 prompts over 5 processes at a time: $hretries retries, $hrequests requests" >&2
check "budget (fakellm failFor): the fleet's retries stay within 20" [ "$hretries" -le 20 ]
check "budget (fakellm failFor): requests = prompts + retries" [ "$hrequests" = $((50 + hretries)) ]
each_one=1
for f in "$work"/h-*.jsonl; do [ "$(count "$f" '"type":"auto_retry_end"')" = 1 ] || each_one=0; done
check "budget (fakellm failFor): every prompt settles with exactly one auto_retry_end" [ "$each_one" = 1 ]

# a successful prompt sends no command on its way (deposits are batched, at most one a second)
rcli config resetstat >/dev/null
home ok "{$shared,$budget}"
COAGENT_DIR="$work/ok" "$COAGENT" --provider faux --no-session --faux-script '[{"text":"fine","delayMs":300}]' -p hi >ok.txt 2>ok.err
calls=$(rcli info commandstats | grep -E '^cmdstat_(evalsha|eval):' | sed 's/.*calls=\([0-9]*\).*/\1/' | paste -sd+ | bc)
check "success: the reply" grep -qx fine ok.txt
check "success: one batched deposit at most (EVALSHA/EVAL calls)" [ "${calls:-0}" -le 1 ]

# a reply of an unexpected type (the key holds a string, not a hash): an error naming the key,
# never a crash; the prompt goes on from the local state
rcli del "$key" >/dev/null
rcli set "$key" not-a-hash >/dev/null
home wrongtype "{$shared,$budget}"
COAGENT_DIR="$work/wrongtype" "$COAGENT" --provider faux --no-session \
  --faux-script '[{"error":"503 Service Unavailable","status":503,"delayMs":300},{"text":"fine"}]' -p hi >wt.txt 2>wt.err; rc=$?
check "wrong type: exit 0, the reply" bash -c "[ $rc = 0 ] && grep -qx fine $work/wt.txt"
check "wrong type: the re-read's error names the key" contains wt.err "limits: redis: unexpected error reply to HGETALL on key $key"
check "wrong type: the script's error names the key" contains wt.err "limits: redis: unexpected error reply to the budget script on key $key"
check "wrong type: Redis is not reported unavailable" bash -c "! grep -q unavailable $work/wt.err"

# ---- 2. RPC get_state, Redis killed mid-run, Redis back ------------------------------------
home rpc "{$shared,$budget}"
rcli del "$key" >/dev/null  # a full bucket again
mkfifo in.fifo
COAGENT_DIR="$work/rpc" "$COAGENT" --provider faux --mode rpc --no-session \
  --faux-script '[{"text":"one"},{"error":"503 Service Unavailable","status":503},{"text":"two"},{"error":"503 Service Unavailable","status":503},{"text":"three"}]' \
  <in.fifo >rpc.out 2>rpc.err &
rpc_pid=$!
exec 3>in.fifo
wait_for rpc.out '"type":"ready"'
# connected: both connections are in Redis's client list
deadline=$((SECONDS + 10))
until [ "$(rcli client list | grep -c .)" -ge 3 ] || [ $SECONDS -ge $deadline ]; do sleep 0.02; done
echo '{"id":"s1","type":"get_state"}' >&3
wait_for rpc.out '"id":"s1"'
check "rpc: get_state says redis" contains rpc.out '"limitsStore":"redis","limitsConnected":true'
echo '{"id":"p1","type":"prompt","message":"hi"}' >&3
wait_for rpc.out '"text":"one"'
stop_redis
echo '{"id":"p2","type":"prompt","message":"again"}' >&3   # fails once, retried: one warning
check "redis killed: the prompt settles" wait_for rpc.out '"success":true,"attempt":1' 10
check "redis killed: one warning" wait_for rpc.err "limits: redis at 127.0.0.1:$port unavailable (" 10
echo '{"id":"s2","type":"get_state"}' >&3
wait_for rpc.out '"id":"s2"'
check "redis killed: get_state says not connected" contains rpc.out '"limitsStore":"redis","limitsConnected":false'
start_redis
check "redis back: one line" wait_for rpc.err "limits: redis at 127.0.0.1:$port is back" 15
echo '{"id":"p3","type":"prompt","message":"more"}' >&3   # a failure: its update reaches Redis
check "redis back: state flows again" bash -c "for i in \$(seq 500); do [ -n \"\$(redis-cli -p $port hget '$key' faux)\" ] && exit 0; sleep 0.02; done; exit 1"
exec 3>&-
wait "$rpc_pid"; rc=$?
check "rpc: exit 0 at stdin EOF" [ "$rc" = 0 ]
check "rpc: exactly one unavailable warning" [ "$(count rpc.err 'unavailable (')" = 1 ]

# ---- 2b. credential blocks and model cooldowns shared (§11.29, §11.30) ----------------------
# Three keys A, B, C in each process's own auth.json (separate COAGENT_DIRs: two machines), one
# coagent-fakellm (its --log records each request's key suffix). Process 1 starts on A, meets a
# usage-limit 429 and switches to B; it stays alive. Process 2 starts after that: none of its
# requests carries A, and it does not take B either (the pool: fewest active sessions → C). The
# hint is 4 s instead of 30 (a shortened block, so the test can see it end): after it, a new
# process takes A again (no session on it; B and C have one each).
rcli flushall >/dev/null
usage='{"status":429,"headers":{"retry-after":"4"},"body":{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}}'
"$FAKELLM" --port 0 --log "$work/llm.log" --script "[$usage,{\"text\":\"fine\",\"times\":1000}]" >llm.out 2>llm.err &
llm_pid=$!
wait_for llm.out listening
llm_port=$(head -1 llm.out | sed 's/.*://')
cred_home() {  # cred_home NAME: settings, models.json, auth.json with A, B, C
  home "$1" "{$shared}"
  echo '{"providers":{"fake":{"baseUrl":"http://127.0.0.1:'$llm_port'/v1","api":"openai-completions","models":[{"id":"m1"}]}}}' >"$work/$1/models.json"
  echo '{"fake":[{"type":"api_key","key":"sk-test-AAAA"},{"type":"api_key","key":"sk-test-BBBB"},{"type":"api_key","key":"sk-test-CCCC"}]}' >"$work/$1/auth.json"
  chmod 600 "$work/$1/auth.json"
}
# start_rpc NAME: a coagent --mode rpc of its own, stdin on fd 4+N (a fifo), connected to Redis
start_rpc() {
  cred_home "$1"
  mkfifo "$work/$1.fifo"
  COAGENT_DIR="$work/$1" "$COAGENT" --mode rpc --no-session --provider fake --model m1 \
    <"$work/$1.fifo" >"$work/$1.out" 2>"$work/$1.err" &
  procs_pids="${procs_pids:-} $!"
  last_pid=$!
  eval "exec ${2}>\"$work/$1.fifo\""
  wait_for "$work/$1.out" '"type":"ready"'
  local deadline=$((SECONDS + 10))
  until grep -q '"limitsConnected":true' "$work/$1.out"; do
    echo '{"id":"st","type":"get_state"}' >&"$2"
    wait_for "$work/$1.out" '"id":"st"'
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.05
  done
}
suffixes() { sed -n "$(($1 + 1)),\$p" llm.log | sed 's/.*"keySuffix":"\([^"]*\)".*/\1/' | paste -sd' '; }
start_rpc p1 5
echo '{"id":"q1","type":"prompt","message":"one"}' >&5
check "blocks: process 1 settles" wait_for p1.out '"type":"agent_settled"' 15
check "blocks: process 1 met the limit on A, then used B" [ "$(suffixes 0)" = "AAAA BBBB" ]
fp_a=$(printf %s sk-test-AAAA | sha256sum | cut -d' ' -f1)
check "blocks: Redis holds A's fingerprint" bash -c "redis-cli -p $port hkeys 'coagent:{limits}:blocks' | grep -qx 'fake $fp_a'"
check "blocks: Redis holds no key" bash -c "! { redis-cli -p $port --scan; redis-cli -p $port hgetall 'coagent:{limits}:blocks'; } | grep -q sk-test"
seen=$(wc -l <llm.log)
start_rpc p2 6
p2_pid=$last_pid
echo '{"id":"q2","type":"prompt","message":"two"}' >&6
check "blocks: process 2 settles" wait_for p2.out '"type":"agent_settled"' 15
p2_keys=$(suffixes "$seen")
echo "blocks: process 2 used: $p2_keys" >&2
check "blocks: process 2's requests never carry A" bash -c "[ -n '$p2_keys' ] && ! echo '$p2_keys' | grep -q AAAA"
check "blocks: process 2 met no usage limit" bash -c "! grep -q auto_retry_start $work/p2.out"
check "pool: process 2 took C (B has process 1's session)" [ "$p2_keys" = "CCCC" ]
fp_b=$(printf %s sk-test-BBBB | sha256sum | cut -d' ' -f1)
fp_c=$(printf %s sk-test-CCCC | sha256sum | cut -d' ' -f1)
check "pool: Redis holds one lease on B and one on C, none on A" bash -c "
  l=\$(redis-cli -p $port hkeys 'coagent:{limits}:leases')
  [ \$(echo \"\$l\" | grep -c 'fake $fp_b ') = 1 ] && [ \$(echo \"\$l\" | grep -c 'fake $fp_c ') = 1 ] && ! echo \"\$l\" | grep -q '$fp_a'"
# coagent limits shows it: A's block (Redis), one session on B and one on C
cred_home p3
COAGENT_DIR="$work/p3" "$COAGENT" limits --json >lim.json 2>lim.err; rc=$?
check "limits --json: exit 0" [ $rc = 0 ]
check "limits --json: A blocked, one session on B and on C" python3 -c "
import json; o=json.load(open('$work/lim.json'))
assert o['store']=='redis' and o['connected'] is True, o
b=[x for x in o['blockedCredentials'] if x['source']=='redis']
assert len(b)==1 and b[0]['provider']=='fake' and b[0]['fingerprint']=='$fp_a' and 0<b[0]['leftMs']<=4000, b
s={x['fingerprint']:x['sessions'] for x in o['activeSessions']}
assert s=={'$fp_b':1,'$fp_c':1}, s"
COAGENT_DIR="$work/p3" "$COAGENT" limits >lim.txt 2>lim.err
check "limits: the text names the store and A's block" bash -c "grep -q 'store: redis at 127.0.0.1:$port (connected)' $work/lim.txt && grep -q '^  fake  $fp_a  .* left  (redis)$' $work/lim.txt"
# the block ends (Redis's clock): a new process takes A again
until_a=$(rcli hget 'coagent:{limits}:blocks' "fake $fp_a")
deadline=$((SECONDS + 15))
until [ "$(rcli time | head -1)" -ge $(( (until_a + 999) / 1000 )) ] || [ $SECONDS -ge $deadline ]; do sleep 0.1; done
seen=$(wc -l <llm.log)
cred_home p3
COAGENT_DIR="$work/p3" "$COAGENT" --no-session --provider fake --model m1 -p three >p3.txt 2>p3.err
check "blocks: after the block, A is used again" [ "$(suffixes "$seen")" = "AAAA" ]
check "pool: a process that ended left no lease" bash -c "! redis-cli -p $port hkeys 'coagent:{limits}:leases' | grep -q '$fp_a'"
# a process that dies leaves its lease behind until it expires (10 s, dropped by the others'
# refresh every 3 s)
{ kill -9 "$p2_pid"; wait "$p2_pid"; } 2>/dev/null
check "pool: a dead process's lease expires" bash -c "for i in \$(seq 200); do redis-cli -p $port hkeys 'coagent:{limits}:leases' | grep -q '$fp_c' || exit 0; sleep 0.1; done; exit 1"
exec 5>&- 6>&-
for p in $procs_pids; do wait "$p" 2>/dev/null; done
procs_pids=""
kill "$llm_pid"; wait "$llm_pid" 2>/dev/null; llm_pid=""

# a fallback cooldown set in one process is honoured by the other: process 1 on fake/m1 meets a
# usage limit with one credential and falls back to fake/m2 (m1 put aside for 60 s); process 2
# on fake/m3 meets one too: its chain [m1, m2] skips m1 (put aside elsewhere) and takes m2
rcli flushall >/dev/null
usage_late="${usage%\}},\"delayMs\":300}"  # process 2's first answer: after its store has read Redis
"$FAKELLM" --port 0 --log "$work/fb.log" --script "[$usage,{\"text\":\"fine\"},$usage_late,{\"text\":\"fine\",\"times\":100}]" >fb.out 2>fb.err &
llm_pid=$!
wait_for fb.out listening
llm_port=$(head -1 fb.out | sed 's/.*://')
chain='"retry":{"fallbackChains":{"default":["fake/m1","fake/m2"]}}'
for n in f1 f2; do
  home "$n" "{$shared,$chain}"
  echo '{"providers":{"fake":{"baseUrl":"http://127.0.0.1:'$llm_port'/v1","api":"openai-completions","apiKey":"sk-test-ONLY","models":[{"id":"m1"},{"id":"m2"},{"id":"m3"}]}}}' >"$work/$n/models.json"
done
COAGENT_DIR="$work/f1" "$COAGENT" --mode json --no-session --provider fake --model m1 -p one >f1.jsonl 2>f1.err
check "cooldown: process 1 fell back from m1 to m2" contains f1.jsonl '"type":"retry_fallback_applied","from":"fake/m1","to":"fake/m2"'
check "cooldown: Redis holds m1's cooldown" bash -c "[ -n \"\$(redis-cli -p $port hget 'coagent:{limits}:cooldowns' fake/m1)\" ]"
COAGENT_DIR="$work/f2" "$COAGENT" --mode json --no-session --provider fake --model m3 -p two >f2.jsonl 2>f2.err
check "cooldown: process 2 skips m1, put aside by process 1" contains f2.jsonl '"type":"retry_fallback_applied","from":"fake/m3","to":"fake/m2"'
check "cooldown: process 2 sent nothing to m1" [ "$(sed -n '3,$p' fb.log | grep -c '"model":"m1"')" = 0 ]
COAGENT_DIR="$work/f2" "$COAGENT" limits --json >lim2.json 2>lim2.err
check "limits --json: the cooldowns" python3 -c "
import json; o=json.load(open('$work/lim2.json'))
m={x['model'] for x in o['modelCooldowns']}
assert m=={'fake/m1','fake/m3'}, o"
COAGENT_DIR="$work/f2" "$COAGENT" limits --clear --provider fake >clr.txt 2>clr.err; rc=$?
check "limits --clear --provider: exit 0, what it did" bash -c "[ $rc = 0 ] && grep -q 'redis at 127.0.0.1:$port: cleared the limits of provider fake' $work/clr.txt"
check "limits --clear --provider: the cooldowns are gone from Redis" [ -z "$(rcli hkeys 'coagent:{limits}:cooldowns')" ]
kill "$llm_pid"; wait "$llm_pid" 2>/dev/null; llm_pid=""

# ---- 3. unreachable, wrong password: a warning, local state, exit 0 -------------------------
stop_redis
home down "{$shared,$budget}"
COAGENT_DIR="$work/down" "$COAGENT" --provider faux --no-session --faux-script '[{"text":"local","delayMs":300}]' -p hi >down.txt 2>down.err; rc=$?
check "unreachable: exit 0" [ "$rc" = 0 ]
check "unreachable: the reply" grep -qx local down.txt
check "unreachable: one warning" [ "$(count down.err "limits: redis at 127.0.0.1:$port unavailable (Connection refused); using local state")" = 1 ]

REDIS_PASS=right start_redis --requirepass right
COAGENT_REDIS_URL="redis://:wrong@127.0.0.1:$port/0" COAGENT_DIR="$work/down" "$COAGENT" --provider faux --no-session \
  --faux-script '[{"text":"local","delayMs":300}]' -p hi >pw.txt 2>pw.err; rc=$?
check "wrong password: exit 0" [ "$rc" = 0 ]
check "wrong password: the reply" grep -qx local pw.txt
check "wrong password: the warning names the reason" contains pw.err "limits: redis at 127.0.0.1:$port unavailable (WRONGPASS"
check "wrong password: never printed" bash -c "! grep -q wrong $work/pw.err"

echo "redis.sh: $passed passed, $failed failed" >&2
[ "$failed" = 0 ]
