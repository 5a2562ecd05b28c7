#!/usr/bin/env bash
# Helpers for the end-to-end tests of interactive mode: `coagent` runs in a detached tmux
# session of a fixed size (own tmux socket, own COAGENT_DIR and working directory), keys go in
# with send-keys, the screen comes back with capture-pane. Every wait polls with a bounded
# timeout. Sourced by the test scripts: `source lib.sh <path to coagent> [<path to
# coagent-fakellm>]` (the second for start_fakellm).
set -uo pipefail

COAGENT=$(realpath "$1")
FAKELLM=${2:+$(realpath "$2")}
fake_pid=""
work=$(mktemp -d)
sock="coagent-tui-$$-${RANDOM}"
export COAGENT_DIR="$work/home"
mkdir -p "$COAGENT_DIR"
command -v tmux >/dev/null || { echo "tmux is not installed (scripts/setup.sh installs it)" >&2; exit 1; }

T() { tmux -L "$sock" "$@"; }
cleanup() {
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null
  tmux -L "$sock" kill-server >/dev/null 2>&1
  rm -f "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/$sock"  # tmux leaves the socket file behind
  rm -rf "$work"
}
trap cleanup EXIT

settings() { printf '%s' "$1" > "$COAGENT_DIR/settings.json"; }

# start_fakellm SCRIPT_JSON: coagent-fakellm on a free port, logging each request to
# $work/fake.log, and a models.json provider "local" (model m1, text and image input) on it with API $FAKE_API
# (default anthropic-messages); start_coagent then uses it instead of the faux provider.
start_fakellm() {
  [ -n "$FAKELLM" ] || { echo "start_fakellm: lib.sh was sourced without coagent-fakellm" >&2; exit 1; }
  printf '%s' "$1" > "$work/fake_script.json"
  "$FAKELLM" --port 0 --script "$work/fake_script.json" --log "$work/fake.log" >"$work/fake.out" 2>&1 </dev/null &
  fake_pid=$!
  local limit=$(( $(now_ms) + 10000 ))
  until grep -q '^listening' "$work/fake.out" 2>/dev/null; do
    (( $(now_ms) < limit )) || { echo "coagent-fakellm did not start" >&2; cat "$work/fake.out" >&2; exit 1; }
    sleep 0.02
  done
  local port
  port=$(sed -n 's/^listening 127.0.0.1:\([0-9]*\)$/\1/p' "$work/fake.out")
  cat >"$COAGENT_DIR/models.json" <<EOF
{"providers":{"local":{"baseUrl":"http://127.0.0.1:$port/v1","api":"${FAKE_API:-anthropic-messages}",
  "apiKey":"any","models":[{"id":"m1","contextWindow":32000,"maxTokens":4096,"reasoning":true,"input":["text","image"]}]}}}
EOF
  COAGENT_MODEL="--provider local --model m1"
}
fake_requests() { [ -f "$work/fake.log" ] && wc -l < "$work/fake.log" || echo 0; }

# start_coagent SCRIPT_JSON [WIDTH HEIGHT]: coagent on the faux provider (named: a developer's
# key never sends a test to the network), or on coagent-fakellm after start_fakellm, waits for
# its screen. $COAGENT_ARGS replaces the default --no-session (a first message, --resume);
# $START_TEXT what to wait for.
start_coagent() {
  printf '%s' "$1" > "$work/script.json"
  local w=${2:-100} h=${3:-30}
  # sanitizer reports go to files (checked at the end), not into the pane
  local asan="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}log_path=$work/asan"
  local ubsan="${UBSAN_OPTIONS:-}${UBSAN_OPTIONS:+:}log_path=$work/ubsan"
  T -f /dev/null new-session -d -s main -x "$w" -y "$h" -c "$work" \
    "env COAGENT_DIR='$COAGENT_DIR' LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=tmux-256color ASAN_OPTIONS='$asan' UBSAN_OPTIONS='$ubsan' \
     '$COAGENT' ${COAGENT_MODEL:---provider faux} ${COAGENT_ARGS:---no-session} --faux-script '$work/script.json' --faux-log '$work/faux.log'; \
     echo \"EXIT=\$?\"; sleep 600"
  T set-option -t main history-limit 5000 >/dev/null
  wait_for "${START_TEXT:-Enter sends}"
}

# stop_coagent: ends this tmux server and waits until its process is gone, so the next
# start_coagent starts a new server instead of reaching the one that is shutting down
# (killing the last session lets the server exit on its own time: "server exited unexpectedly")
stop_coagent() {
  local pid
  pid=$(T display-message -p '#{pid}' 2>/dev/null)
  T kill-server >/dev/null 2>&1
  local limit=$(( $(now_ms) + 10000 ))
  while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do
    (( $(now_ms) < limit )) || { echo "tmux server $pid did not exit" >&2; exit 1; }
    sleep 0.02
  done
  rm -f "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/$sock"
}

screen() { T capture-pane -p -t main; }          # what is visible now
everything() { T capture-pane -p -S - -t main; } # with the scrollback
requests() { [ -f "$work/faux.log" ] && wc -l < "$work/faux.log" || echo 0; }

fail() {
  echo "FAILED: $*" >&2
  echo "---- screen ----" >&2
  everything >&2
  echo "---- faux log ----" >&2
  cat "$work/faux.log" >&2 2>/dev/null
  if [ -f "$work/fake.log" ]; then echo "---- fakellm log ----" >&2; cat "$work/fake.log" >&2; fi
  exit 1
}

now_ms() { date +%s%3N; }

# wait_for TEXT [TIMEOUT_S]: polls the visible screen until it shows TEXT
wait_for() {
  local text=$1 limit=$(( $(now_ms) + ${2:-20} * 1000 ))
  while (( $(now_ms) < limit )); do
    screen | grep -qF -- "$text" && return 0
    sleep 0.05
  done
  fail "timed out waiting for: $text"
}

# wait_gone TEXT [TIMEOUT_S]: polls until the visible screen no longer shows TEXT
wait_gone() {
  local text=$1 limit=$(( $(now_ms) + ${2:-20} * 1000 ))
  while (( $(now_ms) < limit )); do
    screen | grep -qF -- "$text" || return 0
    sleep 0.05
  done
  fail "timed out waiting for this to go away: $text"
}

# wait_requests N [TIMEOUT_S]: until the faux provider has received N requests
wait_requests() {
  local n=$1 limit=$(( $(now_ms) + ${2:-20} * 1000 ))
  while (( $(now_ms) < limit )); do
    [ "$(requests)" -ge "$n" ] && return 0
    sleep 0.05
  done
  fail "timed out waiting for $n faux requests (have $(requests))"
}

# the input row (first row under the rule) shows exactly TEXT
input_is() {
  local row
  row=$(screen | grep -A1 -F '────' | tail -n 1)
  [ "$row" = "> $1" ] || [ "$row" = ">${1:+ $1}" ]
}

type_line() { T send-keys -t main -l -- "$1"; T send-keys -t main Enter; }

expect() { "$@" || fail "expected: $*"; }
screen_has() { everything | grep -qF -- "$1"; }
expect_not_in_screen() { ! everything | grep -qF -- "$1" || fail "unexpected on screen: $1"; }

# leave with Ctrl+D on an empty input; the exit code and no sanitizer report
finish() {
  T send-keys -t main C-d
  wait_for "EXIT=${1:-0}"
  if ls "$work"/asan* "$work"/ubsan* >/dev/null 2>&1; then
    cat "$work"/asan* "$work"/ubsan* >&2 2>/dev/null
    fail "sanitizer report"
  fi
  echo "ok"
}
