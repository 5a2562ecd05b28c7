#!/usr/bin/env bash
# Concurrent coagent processes updating the shared configuration (issue 7):
#  - settings.json: several `coagent --mode rpc` processes send set_auto_retry at once (each one
#    persists retry.enabled to the global file) while a reader re-reads the file non-stop: it is
#    always there and always valid JSON, every command succeeds, the other keys (unknown ones
#    too) survive, and no temporary file is left behind;
#  - auth.json: several processes record usage-limit blocks at once (file_auth_storage, as the
#    HTTP providers do): the file always parses, no credential or foreign entry is lost, and no
#    block written by any process is lost (locked read-modify-write).
# Usage: concurrent_writers.sh <coagent> <coagent_crash_helper>
set -uo pipefail
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
  "$COAGENT" --mode rpc --no-session <"cmds$p.jsonl" >"out$p.jsonl" 2>"err$p.txt" &
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

echo "concurrent writers: $failed failed"
[ "$failed" = 0 ]
