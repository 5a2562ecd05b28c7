#!/usr/bin/env bash
# Crash safety of the session file (issue 7): many iterations of `coagent --mode rpc` on the faux
# provider with a session directory, fed prompts (some with 40 KB replies, so a write is torn now
# and then), retries and tool calls, then kill -9 at a random moment. After each kill:
#  - the session file loads (coagent_crash_helper check-session, and `coagent --session FILE`
#    continues it);
#  - every message whose message_end event had reached stdout before the kill is in the file,
#    in order.
# Every fifth iteration sends nothing and kills the idle process (after its start-up).
# Usage: kill9.sh <coagent> <coagent_crash_helper>
# Env: COAGENT_KILL9_ITERATIONS (default 40), COAGENT_KILL9_SEED (default: random; printed),
#      COAGENT_KILL9_STRICT_EMPTY (default 1; 0 only counts empty files, as before the fix).
#
# Finding 10 (docs/reliability.md "Findings", fixed): the session file is created when the
# session is, and its header is written with the first entry, so a kill before the first prompt
# leaves an empty file. It must load as an empty session: the empty files are checked and
# continued with `coagent --session FILE` like the others.
set -uo pipefail
exec </dev/null  # a stdin that is not a terminal would be read as the prompt
COAGENT=$(realpath "$1")
HELPER=$(realpath "$2")
iterations=${COAGENT_KILL9_ITERATIONS:-40}
strict_empty=${COAGENT_KILL9_STRICT_EMPTY:-1}
seed=${COAGENT_KILL9_SEED:-$(( $(date +%s) % 32768 ))}
RANDOM=$seed
echo "kill9: $iterations iterations, seed $seed (COAGENT_KILL9_SEED=$seed reproduces the kill times)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export COAGENT_DIR="$work/home"
mkdir -p "$COAGENT_DIR"
echo '{"retry":{"baseDelayMs":3,"maxRetries":3}}' > "$COAGENT_DIR/settings.json"
cd "$work"

big=$(head -c 40000 /dev/zero | tr '\0' 'x')
step_sets=(
  "{\"error\":\"503 Service Unavailable\",\"status\":503},{\"text\":\"one two three four five\",\"delayMs\":15}"
  "{\"text\":\"$big\",\"delayMs\":5}"
  "{\"toolCall\":{\"name\":\"not_registered\",\"arguments\":{\"a\":1}}},{\"text\":\"after the tool\",\"delayMs\":10}"
  "{\"error\":\"overloaded\",\"times\":2},{\"text\":\"third time lucky\",\"delayMs\":8}"
  "{\"text\":\"quick\"}"
  "{\"text\":\"a stalled reply that resumes later on\",\"stallMs\":30}"
)

failed=0
killed_with_entries=0
empty_files=0
published_total=0
for i in $(seq 1 "$iterations"); do
  dir="$work/it$i"
  mkdir -p "$dir/sessions"
  steps=""
  for _ in $(seq 1 12); do
    s=${step_sets[$((RANDOM % ${#step_sets[@]}))]}
    steps="${steps:+$steps,}$s"
  done
  echo "[$steps]" > "$dir/script.json"
  idle=$(( i % 5 == 0 ))
  if [ "$idle" = 1 ]; then
    : > "$dir/commands.jsonl"
  else
    {
      echo '{"id":"p0","type":"prompt","message":"first"}'
      for k in 1 2 3 4 5; do echo "{\"id\":\"p$k\",\"type\":\"prompt\",\"message\":\"next $k\",\"streamingBehavior\":\"followUp\"}"; done
    } > "$dir/commands.jsonl"
  fi
  mkfifo "$dir/in"
  # created here: the background job opens them after the fork (and the fifo open blocks), so a
  # kill at 0 ms could otherwise leave no file for the grep below
  : >"$dir/events.jsonl"
  : >"$dir/stderr.txt"
  "$COAGENT" --provider faux --mode rpc --session-dir "$dir/sessions" --faux-script "$dir/script.json" \
    <"$dir/in" >"$dir/events.jsonl" 2>"$dir/stderr.txt" &
  pid=$!
  # the commands, then stdin stays open until the kill
  (cat "$dir/commands.jsonl"; sleep 30) >"$dir/in" &
  feeder=$!
  delay_ms=$((RANDOM % 700))
  [ "$idle" = 1 ] && delay_ms=$((800 + RANDOM % 400))  # after start-up, before any prompt
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  kill "$feeder" 2>/dev/null
  wait "$feeder" 2>/dev/null

  published=$(grep -c '"type":"message_end"' "$dir/events.jsonl")
  published_total=$((published_total + published))
  files=("$dir"/sessions/*.jsonl)
  if [ ! -e "${files[0]}" ]; then
    if [ "$published" != 0 ]; then echo "FAILED it$i (kill at ${delay_ms} ms): no session file, $published messages published" >&2; failed=$((failed+1)); fi
    continue
  fi
  if [ "${#files[@]}" != 1 ]; then
    echo "FAILED it$i: ${#files[@]} session files" >&2; failed=$((failed+1)); continue
  fi
  file=${files[0]}
  if [ ! -s "$file" ]; then
    # killed before the first entry was written: an empty session (finding 10, fixed)
    if [ "$published" != 0 ]; then echo "FAILED it$i: empty session file, $published messages published" >&2; failed=$((failed+1)); fi
    empty_files=$((empty_files + 1))
    if [ "$strict_empty" != 1 ]; then continue; fi
  fi
  if ! "$HELPER" check-session "$dir/events.jsonl" "$file" >"$dir/check.txt" 2>&1; then
    echo "FAILED it$i (kill at ${delay_ms} ms): $(cat "$dir/check.txt")" >&2
    cp "$file" "$work/../kill9-failed-it$i.jsonl" 2>/dev/null
    failed=$((failed+1)); continue
  fi
  killed_with_entries=$((killed_with_entries + 1))
  # and coagent itself continues the session from it
  out=$("$COAGENT" --provider faux --session "$file" -p "after the crash" --faux-script '[{"text":"resumed"}]' 2>"$dir/resume.err")
  rc=$?
  if [ $rc != 0 ] || [ "$out" != "resumed" ]; then
    echo "FAILED it$i: coagent --session FILE exit $rc, stdout '$out': $(cat "$dir/resume.err")" >&2
    failed=$((failed+1)); continue
  fi
  rm -rf "$dir"
done
# Issue 21: kill -9 while a tool runs (the slow test tool of coagent_crash_helper), then continue.
# The next prompt succeeds, the provider gets no dangling tool call (the call has the interrupted
# result before the new prompt), and the tool's side-effect file shows one run, unless the tool
# is registered idempotent (then it runs once more on resume); `coagent --session FILE` (which
# registers no tools) continues such a file the same way.
interrupted="Tool slow_side_effect was interrupted before it finished; it was not run again."
for variant in plain idempotent coagent; do
  tdir="$work/tool-$variant"
  mkdir -p "$tdir/sessions"
  side="$tdir/side-effect.txt"
  "$HELPER" tool-session new "$tdir/sessions" "$side" >"$tdir/new.txt" 2>"$tdir/new.err" &
  pid=$!
  for _ in $(seq 1 400); do  # until the tool runs, at most 20 s
    grep -q "tool started" "$tdir/new.txt" && break
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  files=("$tdir"/sessions/*.jsonl)
  if ! grep -q "tool started" "$tdir/new.txt" || [ ! -s "${files[0]}" ]; then
    echo "FAILED tool-$variant: the tool did not start: $(cat "$tdir/new.err")" >&2
    failed=$((failed+1)); continue
  fi
  case $variant in
    plain) "$HELPER" tool-session continue "${files[0]}" "$side" >"$tdir/cont.txt" 2>&1 ;;
    idempotent) "$HELPER" tool-session continue "${files[0]}" "$side" idempotent >"$tdir/cont.txt" 2>&1 ;;
    coagent)
      "$COAGENT" --provider faux --session "${files[0]}" -p "after the crash" --faux-script '[{"text":"resumed"}]' \
        --faux-log "$tdir/faux.log" >"$tdir/reply.txt" 2>"$tdir/cont.err"
      rc=$?
      { echo "exit $rc"; cat "$tdir/reply.txt"; cat "$tdir/faux.log"; } >"$tdir/cont.txt" ;;
  esac
  rc=$?
  runs=$(grep -c '^run$' "$side")
  want_runs=1
  [ "$variant" = idempotent ] && want_runs=2
  ok=1
  case $variant in
    plain)
      [ $rc = 0 ] && grep -qx "request: user assistant toolResult user" "$tdir/cont.txt" &&
        grep -qxF "toolResult: $interrupted" "$tdir/cont.txt" && grep -qx "reply: resumed" "$tdir/cont.txt" || ok=0 ;;
    idempotent)
      [ $rc = 0 ] && grep -qx "request: user assistant toolResult user" "$tdir/cont.txt" &&
        grep -qx "toolResult: side effect done" "$tdir/cont.txt" && grep -qx "reply: resumed" "$tdir/cont.txt" || ok=0 ;;
    coagent)
      grep -qx "exit 0" "$tdir/cont.txt" && grep -qx "resumed" "$tdir/reply.txt" &&
        grep -qF '{"role":"assistant","text":"","stopReason":"toolUse"},{"role":"toolResult","text":"'"$interrupted"'"},{"role":"user","text":"after the crash"}' "$tdir/faux.log" || ok=0 ;;
  esac
  if [ "$ok" != 1 ] || [ "$runs" != "$want_runs" ]; then
    echo "FAILED tool-$variant: $runs runs of the tool (want $want_runs); continue printed:" >&2
    cat "$tdir/cont.txt" "$tdir/cont.err" >&2 2>/dev/null
    failed=$((failed+1)); continue
  fi
  echo "kill9: tool-$variant: killed during the tool, continued, the tool ran $runs time(s)"
done

echo "kill9: $iterations kills, $killed_with_entries session files checked, $published_total message_end events published in all, $empty_files of them empty (killed before the first entry; loaded and continued as empty sessions unless COAGENT_KILL9_STRICT_EMPTY=0), $failed failed"
[ "$failed" = 0 ]
