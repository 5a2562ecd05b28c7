#!/usr/bin/env bash
# The README's demo is what scripts/demo.sh runs and what it prints (issue 15): the "$ " line of
# the block under "## What the demo shows" is run from the source tree (build/bin/coagent replaced
# by the binary under test) and its output must equal the lines that follow it; scripts/demo.sh
# must run and show that same command.
# Usage: demo.sh <path to coagent> <source dir>
set -uo pipefail
COAGENT=$(realpath "$1")
SRC=$(realpath "$2")
cd "$SRC"
failed=0
fail() { echo "FAILED: $*" >&2; failed=1; }

block=$(awk '/^## What the demo shows/{f=1;next} f&&/^```/{n++; if(n==2) exit; next} f&&n==1' README.md)
[ -n "$block" ] || { echo "FAILED: no demo block in README.md" >&2; exit 1; }
cmd=$(printf '%s\n' "$block" | sed -n 's/^\$ //p' | head -n1)
expected=$(printf '%s\n' "$block" | sed '1d')
[ -n "$cmd" ] || fail "the demo block has no \"\$ \" command line"
case "$cmd" in
  *"build/bin/coagent "*) ;;
  *) fail "the demo command does not run build/bin/coagent: $cmd" ;;
esac
# the same command in scripts/demo.sh: shown (echo) and run
grep -qF -- "echo \"\\\$ $cmd\"" scripts/demo.sh || fail "scripts/demo.sh does not show: \$ $cmd"
grep -qxF -- "$cmd" scripts/demo.sh || fail "scripts/demo.sh does not run: $cmd"

run=${cmd/build\/bin\/coagent/$COAGENT}
actual=$(bash -c "$run" 2>&1 </dev/null)  # a piped stdin would join the prompt
if [ "$actual" != "$expected" ]; then
  fail "the README's output differs from what the command prints"
  echo "--- README" >&2; printf '%s\n' "$expected" >&2
  echo "--- actual" >&2; printf '%s\n' "$actual" >&2
fi
[ "$failed" = 0 ] && echo "README demo: ok"
exit "$failed"
