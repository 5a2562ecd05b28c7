#!/usr/bin/env bash
# Concurrent coagent processes updating the shared configuration (issue 7):
#  - settings.json: several `coagent --mode rpc` processes send set_auto_retry at once (each one
#    persists retry.enabled to the global file) while a reader re-reads the file non-stop: it is
#    always there and always valid JSON, every command succeeds, the other keys (unknown ones
#    too) survive, and no temporary file is left behind;
#  - auth.json: several processes record usage-limit blocks at once (file_auth_storage, as the
#    HTTP providers do): the file always parses, no credential or foreign entry is lost, and no
#    block written by any process is lost (locked read-modify-write);
#  - one session file: a second process that opens a session file in use exits 2 naming the
#    holder (--session FILE and --continue), and racing writers keep every line whole.
# Usage: concurrent_writers.sh <coagent> <coagent_crash_helper>
set -uo pipefail
exec </dev/null  # a stdin that is not a terminal would be read as the prompt
COAGENT=$(realpath "$1")
HELPER=$(realpath "$2")
procs=${COAGENT_WRITERS_PROCESSES:-6}
rounds=${COAGENT_WRITERS_ROUNDS:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failed=0
fail() { echo "FAILED: $*" >&2; failed=$((failed+1)); }

# ---- settings.json ---------------------------------------------------------------------------
export COAGENT_DIR="$work/home"
mkdir -p "$COAGENT_DIR"
echo '{"retry":{"enabled":true,"maxRetries":2},"compaction":{"enabled":false},"theme":{"kept":true}}' > "$COAGENT_DIR/settings.json"
"$HELPER" watch "$COAGENT_DIR/settings.json" 6000 >watch-settings.txt 2>&1 &
watcher=$!
pids=()
for p in $(seq 1 "$procs"); do
  {
    for r in $(seq 1 "$rounds"); do
      if [ $(( (p + r) % 2 )) = 0 ]; then v=true; else v=false; fi
      echo "{\"id\":$r,\"type\":\"set_auto_retry\",\"enabled\":$v}"
    done
    echo '{"id":"state","type":"get_state"}'
  } > "cmds$p.jsonl"
  "$COAGENT" --provider faux --mode rpc --no-session <"cmds$p.jsonl" >"out$p.jsonl" 2>"err$p.txt" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a coagent --mode rpc process exited with an error"; done
wait "$watcher" || fail "settings.json was missing or invalid during the writes: $(cat watch-settings.txt)"
for p in $(seq 1 "$procs"); do
  ok=$(grep -c '"command":"set_auto_retry","success":true' "out$p.jsonl")
  [ "$ok" = "$rounds" ] || fail "process $p: $ok of $rounds set_auto_retry succeeded: $(grep -m1 '"success":false' "out$p.jsonl") $(cat "err$p.txt")"
done
[ "$("$HELPER" json-get "$COAGENT_DIR/settings.json" theme.kept)" = true ] || fail "the unknown key theme.kept was lost"
[ "$("$HELPER" json-get "$COAGENT_DIR/settings.json" retry.maxRetries)" = 2 ] || fail "retry.maxRetries was lost"
[ "$("$HELPER" json-get "$COAGENT_DIR/settings.json" compaction.enabled)" = false ] || fail "compaction.enabled was lost"
enabled=$("$HELPER" json-get "$COAGENT_DIR/settings.json" retry.enabled)
[ "$enabled" = true ] || [ "$enabled" = false ] || fail "retry.enabled is $enabled"
leftover=$(find "$COAGENT_DIR" -name '*.tmp.*' | wc -l)
[ "$leftover" = 0 ] || fail "$leftover temporary files left in $COAGENT_DIR"
echo "settings.json: $procs processes x $rounds set_auto_retry, reader: $(cat watch-settings.txt)"

# ---- auth.json -------------------------------------------------------------------------------
creds=""
for k in $(seq 1 12); do creds="${creds:+$creds,}{\"type\":\"api_key\",\"key\":\"sk-$k\"}"; done
echo "{\"openai\":[$creds],\"anthropic\":{\"type\":\"oauth\",\"refresh\":\"r\"},\"note\":{\"type\":\"other\",\"kept\":true}}" > "$COAGENT_DIR/auth.json"
"$HELPER" watch "$COAGENT_DIR/auth.json" 4000 >watch-auth.txt 2>&1 &
watcher=$!
pids=()
for p in $(seq 1 "$procs"); do
  "$HELPER" auth-hammer "$COAGENT_DIR/auth.json" openai "$rounds" >"blocks$p.txt" 2>"hammer$p.txt" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "an auth writer failed: $(cat hammer*.txt)"; done
wait "$watcher" || fail "auth.json was missing or invalid during the writes: $(cat watch-auth.txt)"
records=()
for p in $(seq 1 "$procs"); do records+=("blocks$p.txt"); done
"$HELPER" check-auth "$COAGENT_DIR/auth.json" "${records[@]}" >check-auth.txt 2>&1 || fail "$(cat check-auth.txt)"
[ "$("$HELPER" json-get "$COAGENT_DIR/auth.json" note.kept)" = true ] || fail "the foreign entry note was lost"
[ "$("$HELPER" json-get "$COAGENT_DIR/auth.json" anthropic.refresh)" = '"r"' ] || fail "the oauth credential was lost"
leftover=$(find "$COAGENT_DIR" -name '*.tmp.*' | wc -l)
[ "$leftover" = 0 ] || fail "$leftover temporary files left in $COAGENT_DIR"
echo "auth.json: $procs processes x $rounds blocks: $(cat check-auth.txt), reader: $(cat watch-auth.txt)"

# ---- one session file, two writers (issue 17 item 2) ------------------------------------------
# A session file is held under an exclusive lock for the life of its session: a second process
# that opens it (--session FILE, or --continue picking it) exits 2 with "<file>: in use by
# process <pid>", never writes to it and never silently picks another file; processes that race
# for one file take turns, and every line of the file stays whole.
export COAGENT_DIR="$work/home-sessions"  # no settings.json: nothing else on stderr
sess="$work/sessions"
"$COAGENT" --provider faux -p first --session-dir "$sess" --faux-script '[{"text":"one"}]' >/dev/null 2>first-err.txt || fail "first session: $(cat first-err.txt)"
file=$(ls "$sess"/*.jsonl)
coproc HOLD { exec "$COAGENT" --provider faux --mode rpc --session "$file" 2>hold-err.txt; }
holder=$HOLD_PID
read -r -t 30 -u "${HOLD[0]}" line
[ "$line" = '{"type":"ready"}' ] || fail "the holder did not start: $line $(cat hold-err.txt)"
size_before=$(stat -c %s "$file")
"$COAGENT" --provider faux --mode rpc --session "$file" --session-dir "$sess" </dev/null >second-out.txt 2>second-err.txt; rc=$?
[ $rc = 2 ] || fail "a second process on the same --session FILE exited $rc, not 2"
[ "$(cat second-err.txt)" = "coagent: $file: in use by process $holder" ] || fail "second process: $(cat second-err.txt)"
[ ! -s second-out.txt ] || fail "the refused process wrote to stdout: $(cat second-out.txt)"
"$COAGENT" --provider faux -p again --continue --session-dir "$sess" --faux-script '[{"text":"two"}]' >cont-out.txt 2>cont-err.txt; rc=$?
[ $rc = 2 ] || fail "--continue on a session in use exited $rc, not 2"
[ "$(cat cont-err.txt)" = "coagent: $file: in use by process $holder" ] || fail "--continue: $(cat cont-err.txt)"
[ "$(ls "$sess" | wc -l)" = 1 ] || fail "--continue created another session file: $(ls "$sess")"
[ "$(stat -c %s "$file")" = "$size_before" ] || fail "a refused process wrote to the session file"
# the holder writes meanwhile; then it ends and the file is free again
echo '{"id":"p","type":"prompt","message":"held"}' >&"${HOLD[1]}"
while read -r -t 30 -u "${HOLD[0]}" line; do [[ $line == *agent_settled* ]] && break; done
exec {HOLD[1]}>&-
wait "$holder" || fail "the holder exited with an error: $(cat hold-err.txt)"
# racing writers: every one either runs (exit 0) or is refused (exit 2, "in use by process")
racers=${COAGENT_SESSION_RACERS:-6}
pids=()
for r in $(seq 1 "$racers"); do
  "$COAGENT" --provider faux -p "race $r" --session "$file" --faux-script "[{\"text\":\"reply $r $(head -c 3000 /dev/zero | tr '\0' x)\"}]" >race$r-out.txt 2>race$r-err.txt &
  pids+=($!)
done
ran=0
for r in $(seq 1 "$racers"); do
  wait "${pids[$((r-1))]}"; rc=$?
  if [ $rc = 0 ]; then ran=$((ran+1));
  elif [ $rc = 2 ]; then grep -q "^coagent: $file: in use by process [0-9]*$" race$r-err.txt || fail "racer $r: $(cat race$r-err.txt)";
  else fail "racer $r exited $rc: $(cat race$r-err.txt)"; fi
done
[ "$ran" -ge 1 ] || fail "no racer ran"
: > no-events.txt
"$HELPER" check-session no-events.txt "$file" >check-session.txt 2>&1 || fail "$(cat check-session.txt)"
grep -q ' torn 0$' check-session.txt || fail "the session file has torn lines: $(cat check-session.txt)"
# header + first (2) + held (2) + 2 per racer that ran
expected_lines=$((1 + 2 + 2 + 2 * ran))
[ "$(wc -l < "$file")" = "$expected_lines" ] || fail "the session file has $(wc -l < "$file") lines, expected $expected_lines"
echo "one session file: a second process and --continue refused; $ran of $racers racers ran, the others refused"

echo "concurrent writers: $failed failed"
[ "$failed" = 0 ]
