#!/usr/bin/env bash
# ctest example_http_server_load: starts examples/http_server on 127.0.0.1 (port chosen by the
# OS), runs examples/load_client against it (which also scrapes GET /metrics and checks every
# counter against the requests it made), then stops the server with SIGTERM and checks it
# exited cleanly. Usage: run_load_test.sh SERVER CLIENT BACKOFF_MS REQUESTS MAX_SECONDS [THREADS]
set -euo pipefail
server=$1 client=$2 backoff_ms=$3 requests=$4 max_seconds=$5 threads=${6:-1}
dir=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

# created here: the background job opens them only after the fork, maybe after the first sed below
: >"$dir/out"
: >"$dir/err"
"$server" --port 0 --base-delay-ms "$backoff_ms" --threads "$threads" >"$dir/out" 2>"$dir/err" &
pid=$!
port=
for _ in $(seq 1 300); do  # up to 30 s for the first line (sanitizer start-up is slow)
  port=$(sed -n 's/^listening 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$dir/out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "server exited:"; cat "$dir/err"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "server did not start"; cat "$dir/err"; exit 1; }

rc=0
# the server fails the first attempt of requests 0, 2, 4, …: half of them are retried once
"$client" --port "$port" --requests "$requests" --max-seconds "$max_seconds" \
  --expect-retried $(((requests + 1) / 2)) --min-peak-in-flight $((requests / 4)) \
  --check-metrics || rc=$?

kill -TERM "$pid"
wait "$pid" || { src=$?; echo "server exited with $src:"; cat "$dir/err"; exit 1; }
pid=
cat "$dir/err"
exit $rc
