# Shared by the shell tests (sourced): counted checks, waits capped in real time (never a fixed
# sleep), a free port, and a private redis-server. Each test keeps its own scenario; the caller
# sets `work` (its temporary directory) before start_redis.

passed=0
failed=0
check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed+1)); else failed=$((failed+1)); echo "FAILED: $name" >&2; fi
}
contains() { grep -qF -- "$2" "$1"; }
count() { grep -cF -- "$2" "$1"; }
equals() { [ "$(cat "$1")" = "$2" ]; }
wait_for() {  # wait_for FILE TEXT [SECONDS]: until FILE contains TEXT
  local deadline=$((SECONDS + ${3:-10}))
  until grep -qF -- "$2" "$1" 2>/dev/null; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.02
  done
}
wait_count() {  # wait_count FILE TEXT N [SECONDS]: until FILE holds TEXT N times
  local deadline=$((SECONDS + ${4:-10}))
  until [ "$(grep -cF -- "$2" "$1" 2>/dev/null)" -ge "$3" ]; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.02
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }

# start_redis [extra redis-server args...]: a redis-server of the test's own on 127.0.0.1:$port,
# its files in $work, no persistence; sets redis_pid; exits the test when it does not answer
# PING within 10 s (with REDIS_PASS set, PING authenticates)
redis_pid=""
start_redis() {
  command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/setup.sh)" >&2; exit 1; }
  redis-server --port "$port" --bind 127.0.0.1 --dir "$work" --save '' --appendonly no \
    "$@" >"$work/redis.log" 2>&1 3>&- &  # (not a caller's fifo on fd 3: its EOF would end coagent)
  redis_pid=$!
  local deadline=$((SECONDS + 10))
  until redis-cli -p "$port" ${REDIS_PASS:+-a "$REDIS_PASS" --no-auth-warning} ping 2>/dev/null | grep -q PONG; do
    [ $SECONDS -ge $deadline ] && { echo "redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1; }
    sleep 0.02
  done
}
stop_redis() { kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; redis_pid=""; }
