#!/usr/bin/env bash
# The coagent executable from outside: print/json modes, exit codes, stderr lines, bad input,
# --faux-log, classify. Usage: test_cli.sh <path to coagent> <path to tests/data>
set -uo pipefail
COAGENT=$(realpath "$1")
DATA=$(realpath "$2")
source "$(dirname "$0")/../checks.sh"  # check, contains, equals
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export COAGENT_DIR="$work/home"
# every run names --provider faux; the few that test the choice without one (a resumed
# session's recorded model, the default when no key exists) must not find a developer's key
unset OPENAI_API_KEY ANTHROPIC_API_KEY
# stdin that is not a terminal is read as (part of) the prompt: runs that pipe none read nothing
exec </dev/null
mkdir -p "$COAGENT_DIR"
echo '{"retry":{"baseDelayMs":1}}' > "$COAGENT_DIR/settings.json"
cd "$work"


two_errors='[{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2},{"text":"Hello there"}]'

# print mode: reply on stdout, retry lines on stderr, exit 0
"$COAGENT" --provider faux -p hi --no-session --faux-script "$two_errors" >out.txt 2>err.txt; rc=$?
check "print exit 0" [ $rc = 0 ]
check "print reply on stdout" equals out.txt "Hello there"
check "retry line 1" contains err.txt "Retrying (1/3) in 0.1s… — 503 Service Unavailable: upstream overloaded"
check "retry line 2" contains err.txt "Retrying (2/3) in 0.1s… — 503 Service Unavailable: upstream overloaded"
check "no failure line" bash -c "! grep -q 'Retry failed' err.txt"

# exhausted: failure line, exit 1
"$COAGENT" --provider faux -p hi --no-session --faux-script '[{"error":"502 Bad Gateway","status":502,"times":4}]' >out.txt 2>err.txt; rc=$?
check "exhausted exit 1" [ $rc = 1 ]
check "exhausted failure line" contains err.txt "Retry failed after 3 attempts: 502 Bad Gateway"
check "exhausted: nothing on stdout" equals out.txt ""

# non-retryable: Error line, exit 1
"$COAGENT" --provider faux -p hi --no-session --faux-script '[{"error":"401 Incorrect API key","status":401}]' >out.txt 2>err.txt; rc=$?
check "non-retryable exit 1" [ $rc = 1 ]
check "non-retryable error line" contains err.txt "Error: 401 Incorrect API key"
check "non-retryable: no retry line" bash -c "! grep -q Retrying err.txt"

# seconds are ceil(delayMs/1000)
echo '{"retry":{"baseDelayMs":1500,"maxRetries":1}}' > "$COAGENT_DIR/settings.json"
"$COAGENT" --provider faux -p hi --no-session --faux-script '[{"error":"503 x","status":503},{"text":"ok"}]' >out.txt 2>err.txt
check "ceil seconds" contains err.txt "Retrying (1/1) in 2s… — 503 x"
echo '{"retry":{"baseDelayMs":1}}' > "$COAGENT_DIR/settings.json"

# json mode: every event as a JSON line, agent_settled last
"$COAGENT" --provider faux --mode json -p hi --no-session --faux-script "$two_errors" >out.txt 2>err.txt; rc=$?
check "json exit 0" [ $rc = 0 ]
types=$(node -e 'const l=require("fs").readFileSync("out.txt","utf8").trim().split("\n").map(JSON.parse);console.log(l.filter(e=>e.type!=="message_update").map(e=>e.type+(e.type==="auto_retry_start"?e.attempt+":"+e.delayMs:"")+(e.type==="auto_retry_end"?e.success+":"+e.attempt:"")).join(","))')
check "json event order" [ "$types" = "agent_start,turn_start,message_start,message_end,message_start,message_end,turn_end,agent_end,auto_retry_start1:1,agent_start,turn_start,message_start,message_end,turn_end,agent_end,auto_retry_start2:2,agent_start,turn_start,message_start,message_end,auto_retry_endtrue:2,turn_end,agent_end,agent_settled" ] || echo "got: $types" >&2

# --faux-log: what the provider received (no errored message sent back)
"$COAGENT" --provider faux -p hi --no-session --faux-script "$two_errors" --faux-log log.jsonl >/dev/null 2>&1
check "faux log has 3 requests" [ "$(wc -l < log.jsonl)" = 3 ]
check "faux log: only the user message each time" bash -c "! grep -q assistant log.jsonl"

# session file: written under $COAGENT_DIR/sessions with the errors kept
"$COAGENT" --provider faux -p hi --faux-script "$two_errors" >/dev/null 2>&1
f=$(ls "$COAGENT_DIR"/sessions/*.jsonl | head -1)
check "session file written" [ -n "$f" ]
check "session file keeps the errors" [ "$(grep -c '"stopReason":"error"' "$f")" = 2 ]
# --continue resumes it: the next request carries the history (errors filtered)
"$COAGENT" --provider faux -p again --continue --faux-script '[{"text":"more"}]' --faux-log log2.jsonl >/dev/null 2>&1
check "--continue sends the history" contains log2.jsonl '"text":"hi"'
check "--continue filters errors" bash -c "! grep -q '\"stopReason\":\"error\"' log2.jsonl"

# issue 17 item 1: a $COAGENT_DIR and sessions/ that coagent creates are 0700, session files
# 0600, whatever the umask; an existing sessions/ that others can read is warned about
fresh="$work/fresh-home"
(umask 000; COAGENT_DIR="$fresh" "$COAGENT" --provider faux -p hi --faux-script '[{"text":"x"}]' >/dev/null 2>err.txt)
check "created COAGENT_DIR is 0700" [ "$(stat -c %a "$fresh")" = 700 ]
check "created sessions/ is 0700" [ "$(stat -c %a "$fresh/sessions")" = 700 ]
check "session file is 0600" [ "$(stat -c %a "$fresh"/sessions/*.jsonl)" = 600 ]
check "no warning for a private sessions/" equals err.txt ""
chmod 755 "$fresh/sessions"
COAGENT_DIR="$fresh" "$COAGENT" --provider faux -p hi --faux-script '[{"text":"x"}]' >/dev/null 2>err.txt
check "readable sessions/ warned" contains err.txt "$fresh/sessions: the session directory can be read by group or others (mode 0755)"
check "readable sessions/ not chmodded" [ "$(stat -c %a "$fresh/sessions")" = 755 ]

# issue 17 item 8: RPC mode exits 1 when stdout fails. EPIPE: a FIFO's write end whose only
# reader is closed before coagent starts (no race); and a closed stdout.
mkfifo "$work/nobody-reads"
exec 3<>"$work/nobody-reads" 4>"$work/nobody-reads"
exec 3<&-
echo '{"type":"get_state"}' | "$COAGENT" --provider faux --mode rpc --no-session >&4 2>err.txt; rc=$?
exec 4>&-
check "rpc: EPIPE on stdout exits 1" [ $rc = 1 ] || echo "got rc $rc" >&2
check "rpc: EPIPE logged" contains err.txt "writing stdout failed"
echo '{"type":"get_state"}' | "$COAGENT" --provider faux --mode rpc --no-session >&- 2>err.txt; rc=$?
check "rpc: closed stdout exits 1" [ $rc = 1 ] || echo "got rc $rc" >&2
check "rpc: closed stdout named" contains err.txt "stdout"

# issue 17 item 4: a running coagent cannot be core-dumped or ptrace-read by its user
# (PR_SET_DUMPABLE 0): /proc/<pid>/status then belongs to root, not to the process's user. Run as
# nobody when the tests run as root, so that the owner tells. COAGENT_ALLOW_CORE_DUMPS=1 opts out.
pub=$(mktemp -d); chmod 755 "$pub"
run_as=()
[ "$(id -u)" = 0 ] && run_as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
proc_owner() {  # proc_owner [ENV=VALUE]: the owner of /proc/<pid>/status of a running coagent --mode rpc
  local line owner
  coproc RPC { cd "$pub" && exec env COAGENT_DIR="$pub/home" "$@" "${run_as[@]}" "$COAGENT" --provider faux --mode rpc --no-session 2>"$pub/err"; }
  read -r -t 30 -u "${RPC[0]}" line
  owner=$(stat -c %u "/proc/$RPC_PID/status")
  exec {RPC[1]}>&-
  wait "$RPC_PID"
  echo "$owner"
}
me=$(id -u); [ "$me" = 0 ] && me=$(id -u nobody)
check "not dumpable by default" [ "$(proc_owner)" = 0 ]
check "COAGENT_ALLOW_CORE_DUMPS=1 keeps it dumpable" [ "$(proc_owner COAGENT_ALLOW_CORE_DUMPS=1)" = "$me" ]
COAGENT_ALLOW_CORE_DUMPS=yes "$COAGENT" --provider faux -p hi --no-session >out.txt 2>err.txt; rc=$?
check "bad COAGENT_ALLOW_CORE_DUMPS exit 2" [ $rc = 2 ]
check "bad COAGENT_ALLOW_CORE_DUMPS named" equals err.txt 'coagent: COAGENT_ALLOW_CORE_DUMPS: expected 1 (allow core dumps) or 0, found "yes"'
rm -rf "$pub"

# issue 17 item 6: invalid UTF-8 becomes U+FFFD where it enters (-p, the working directory,
# a provider's error text); every line coagent writes is valid UTF-8
latin=$(printf 'caf\xe9 au lait')
"$COAGENT" --provider faux --mode json -p "$latin" --no-session --faux-script '[{"text":"ok"}]' >out.txt 2>err.txt; rc=$?
check "-p Latin-1: exit 0" [ $rc = 0 ]
check "-p Latin-1: json lines are valid UTF-8" iconv -f UTF-8 -t UTF-8 out.txt -o /dev/null
check "-p Latin-1: U+FFFD in its place" contains out.txt "$(printf '"text":"caf\xef\xbf\xbd au lait"')"
baddir="$work/$(printf 'dir\xff')"
mkdir "$baddir"
(cd "$baddir" && "$COAGENT" --provider faux -p hi --faux-script '[{"text":"x"}]' >/dev/null 2>"$work/err.txt")
f=$(ls -t "$COAGENT_DIR"/sessions/*.jsonl | head -1)
check "non-UTF-8 cwd: session file is valid UTF-8" iconv -f UTF-8 -t UTF-8 "$f" -o /dev/null
check "non-UTF-8 cwd: stored with U+FFFD" contains "$f" "$(printf '"cwd":"%s/dir\xef\xbf\xbd"' "$work")"
(cd "$baddir" && "$COAGENT" --provider faux -p again --continue --faux-script '[{"text":"y"}]' --faux-log "$work/log3.jsonl" >/dev/null 2>"$work/err.txt"); rc=$?
check "non-UTF-8 cwd: --continue loads it" [ $rc = 0 ] || cat "$work/err.txt" >&2
check "non-UTF-8 cwd: --continue sends the history" contains "$work/log3.jsonl" '"text":"hi"'

# no script: the friendly fixed reply
"$COAGENT" --provider faux -p hi --no-session >out.txt 2>&1
check "default reply" equals out.txt "Hello from the faux provider."

# issue 15: provider error text is sanitised on stderr; an empty one shows its status
"$COAGENT" --provider faux -p hi --no-session --faux-script '[{"error":"400 bad \u001b[31mred\u001b]0;title\u0007 x","status":400}]' >out.txt 2>err.txt; rc=$?
check "hostile error exit 1" [ $rc = 1 ]
check "hostile error has no ESC" bash -c "! grep -q $'\x1b' err.txt"
check "hostile error has no BEL" bash -c "! grep -q $'\x07' err.txt"
check "hostile error shown" contains err.txt "Error: 400 bad �[31mred�]0;title� x"
"$COAGENT" --provider faux -p hi --no-session --faux-script '[{"error":"","status":503}]' >out.txt 2>err.txt; rc=$?
check "empty error exit 1" [ $rc = 1 ]
check "empty error names its status" equals err.txt "Error: 503 status code (no body)"

# bad input → exit 2 with a clear message
"$COAGENT" --no-such-flag >out.txt 2>err.txt; rc=$?
check "unknown flag exit 2" [ $rc = 2 ]
check "unknown flag named" contains err.txt "--no-such-flag"
# issue 15: the error and one line pointing at --help, not the whole help
check "unknown flag: two lines" [ "$(wc -l < err.txt)" = 2 ]
check "unknown flag points at --help" contains err.txt "Run 'coagent --help' for the flags."
check "unknown flag: no help dump" bash -c "! grep -q 'Usage:' err.txt"
"$COAGENT" classify --message x --bogus >out.txt 2>err.txt; rc=$?
check "classify bad flag exit 2" [ $rc = 2 ]
check "classify bad flag points at classify --help" contains err.txt "Run 'coagent classify --help' for the flags."
check "classify bad flag: two lines" [ "$(wc -l < err.txt)" = 2 ]
for v in 0 -5 abc 1.5; do
  "$COAGENT" --provider faux -p hi --no-session --faux-context-window "$v" >out.txt 2>err.txt; rc=$?
  check "--faux-context-window $v exit 2" [ $rc = 2 ]
  check "--faux-context-window $v message" contains err.txt "coagent: --faux-context-window: must be a whole number of tokens, at least 1 (got $v)"
  check "--faux-context-window $v: no 300-digit range" bash -c "[ \$(wc -c < err.txt) -lt 200 ]"
done
"$COAGENT" classify --help >out.txt 2>err.txt; rc=$?
check "classify --help exit 0" [ $rc = 0 ]
check "classify --help: its own exit codes" contains out.txt "Exit codes: 0 the decision was printed; 2 usage error"
check "classify --help: no prompt exit codes" bash -c "! grep -q 'the prompt succeeded' out.txt"
# contradictory flags: exit 2 naming both
contradiction() {  # contradiction NAME EXPECTED-TEXT ARGS...
  local name=$1 text=$2; shift 2
  "$COAGENT" --provider faux "$@" >out.txt 2>err.txt; local rc=$?
  check "$name exit 2" [ $rc = 2 ]
  check "$name names both flags" contains err.txt "$text"
}
touch some.jsonl
contradiction "--no-session --continue" "coagent: --no-session and --continue cannot be used together" --no-session --continue -p hi
contradiction "--no-session --session" "coagent: --no-session and --session cannot be used together" --no-session --session some.jsonl -p hi
contradiction "--continue --session" "coagent: --continue and --session cannot be used together" --continue --session some.jsonl -p hi
contradiction "-p --mode rpc" "coagent: -p and --mode rpc cannot be used together" -p hi --mode rpc
contradiction "-p --mode interactive" "coagent: -p and --mode interactive cannot be used together" -p hi --mode interactive
contradiction "--no-session --session-dir" "coagent: --no-session and --session-dir cannot be used together" --no-session --session-dir d -p hi
printf '[{"text":"a"},\n  {"text": }]' > bad.json
"$COAGENT" --provider faux -p hi --no-session --faux-script bad.json >out.txt 2>err.txt; rc=$?
check "bad script exit 2" [ $rc = 2 ]
check "bad script names file and position" contains err.txt "bad.json:2:"
"$COAGENT" --provider faux -p hi --no-session --faux-script missing.json >out.txt 2>err.txt; rc=$?
check "missing script exit 2" [ $rc = 2 ]
check "missing script named" contains err.txt "missing.json"
echo '{"retry":{"maxRetries":"three"}}' > "$COAGENT_DIR/settings.json"
"$COAGENT" --provider faux -p hi --no-session >out.txt 2>err.txt; rc=$?
check "bad settings exit 2" [ $rc = 2 ]
check "bad settings names file, key, value" contains err.txt "settings.json: key \"retry.maxRetries\""
check "bad settings names the value" contains err.txt '"three"'
echo '{"retry":{"baseDelayMs":1},"quietStartup":true}' > "$COAGENT_DIR/settings.json"
"$COAGENT" --provider faux -p hi --no-session >out.txt 2>err.txt; rc=$?
check "unknown key is a warning only" [ $rc = 0 ]
check "unknown key warned" contains err.txt "quietStartup"
"$COAGENT" --provider faux --mode print >out.txt 2>err.txt; rc=$?
check "print without -p exit 2" [ $rc = 2 ]
"$COAGENT" --provider faux </dev/null >out.txt 2>err.txt; rc=$?
check "not a tty exit 2" [ $rc = 2 ]
check "not a tty message" contains err.txt "--mode rpc"
"$COAGENT" --help >out.txt 2>&1; rc=$?
check "--help exit 0" [ $rc = 0 ]
check "--help lists exit codes" contains out.txt "Exit codes"
"$COAGENT" --version >out.txt 2>&1
check "--version" contains out.txt "coagent "

# classify: every provider-errors.jsonl line through the executable
while IFS= read -r line; do
  msg=$(node -e 'console.log(JSON.parse(process.argv[1]).message)' "$line")
  status=$(node -e 'const s=JSON.parse(process.argv[1]).status;console.log(s===undefined?"":s)' "$line")
  expect=$(node -e 'console.log(JSON.parse(process.argv[1]).expect)' "$line")
  args=(classify --message "$msg")
  [ -n "$status" ] && args+=(--status "$status")
  limit=$(node -e 'console.log(JSON.parse(process.argv[1]).limit)' "$line")
  got=$("$COAGENT" "${args[@]}" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s);console.log(o.kind+" "+o.limit)})')
  check "classify: $msg" [ "$got" = "$expect $limit" ]
done < "$DATA/provider-errors.jsonl"
"$COAGENT" classify --message "429 Too Many Requests retry-after-ms=1500" --now 0 >out.txt
check "classify prints the hint" equals out.txt '{"kind":"retryable","retryable":true,"rule":"retryable/too many requests","limit":"rate","retryAfterMs":1500}' || cat out.txt >&2

# a resumed session continues on the model it was held on (issue 15 item 2): never a silent
# switch to the command line's default; an explicit --provider/--model wins and is recorded
rs="$work/resume"
mkdir -p "$rs/home"
echo '{"retry":{"baseDelayMs":1}}' > "$rs/home/settings.json"
( cd "$rs" && COAGENT_DIR="$rs/home" "$COAGENT" -p hi >/dev/null 2>&1 )
rfile=$(ls "$rs"/home/sessions/*.jsonl)
# as if the conversation had been held on local/m1 (the reply records its model)
sed -i 's/"provider":"faux","model":"faux"/"provider":"local","model":"m1"/' "$rfile"
( cd "$rs" && COAGENT_DIR="$rs/home" "$COAGENT" --session "$rfile" -p again >"$work/out.txt" 2>"$work/err.txt" ); rc=$?
check "resume: recorded model unavailable exit 2" [ $rc = 2 ]
check "resume: the error names the recorded model" contains err.txt "the conversation was held on local/m1, which is not available now"
check "resume: nothing ran" equals out.txt ""
echo '{"providers":{"local":{"baseUrl":"http://127.0.0.1:9/v1","api":"openai-completions","apiKey":"any","models":[{"id":"m1"}]}}}' > "$rs/home/models.json"
( cd "$rs" && COAGENT_DIR="$rs/home" "$COAGENT" --session "$rfile" -p again >"$work/out.txt" 2>"$work/err.txt" ); rc=$?
check "resume: continues on the recorded model" contains err.txt "cannot connect to 127.0.0.1:9"
check "resume: recorded model's failure exit 1" [ $rc = 1 ]
( cd "$rs" && COAGENT_DIR="$rs/home" "$COAGENT" --session "$rfile" --provider faux -p again >"$work/out.txt" 2>"$work/err.txt" ); rc=$?
check "resume: explicit --provider wins" [ $rc = 0 ]
check "resume: explicit --provider reply" equals out.txt "Hello from the faux provider."
check "resume: the switch is recorded" contains "$rfile" '"type":"model_change"'
( cd "$rs" && COAGENT_DIR="$rs/home" "$COAGENT" --continue -p again >"$work/out.txt" 2>"$work/err.txt" ); rc=$?
check "resume: --continue after the switch stays on faux" [ $rc = 0 ]
check "resume: --continue reply" equals out.txt "Hello from the faux provider."

# issue 23: the command line of the everyday agent CLIs
# MESSAGE without a terminal: print mode
"$COAGENT" --provider faux --no-session "say hi" --faux-script '[{"text":"positional ok"}]' --faux-log pos.jsonl </dev/null >out.txt 2>err.txt; rc=$?
check "MESSAGE: print mode exit 0" [ $rc = 0 ]
check "MESSAGE: the reply" equals out.txt "positional ok"
check "MESSAGE: the prompt sent" contains pos.jsonl '"text":"say hi"'
# a piped stdin is the prompt
echo "piped question" | "$COAGENT" --provider faux --no-session --faux-script '[{"text":"piped ok"}]' --faux-log pipe.jsonl >out.txt 2>err.txt; rc=$?
check "stdin prompt: exit 0" [ $rc = 0 ]
check "stdin prompt: the reply" equals out.txt "piped ok"
check "stdin prompt: the prompt sent" contains pipe.jsonl '"text":"piped question"}'
# -p TEXT with a piped stdin: TEXT, a blank line, then stdin
printf 'line 1\nline 2\n' | "$COAGENT" --provider faux --no-session -p explain --faux-log both.jsonl >out.txt 2>err.txt; rc=$?
check "-p and stdin: exit 0" [ $rc = 0 ]
check "-p and stdin: joined" contains both.jsonl '"text":"explain\n\nline 1\nline 2"}'
# empty stdin and no prompt: exit 2 with a usage line
"$COAGENT" --provider faux --no-session </dev/null >out.txt 2>err.txt; rc=$?
check "empty stdin: exit 2" [ $rc = 2 ]
check "empty stdin: usage line" contains err.txt "usage: coagent [OPTIONS] [MESSAGE]"
echo "   " | "$COAGENT" --provider faux --no-session >out.txt 2>err.txt; rc=$?
check "blank stdin: exit 2" [ $rc = 2 ]
# MESSAGE and -p MESSAGE together: refused
contradiction "-p MESSAGE and MESSAGE" "coagent: -p MESSAGE and MESSAGE cannot be used together" -p one two
# -c is --continue, -r is --resume (which needs a terminal to pick on)
cdir="$work/short"; mkdir -p "$cdir"
( cd "$cdir" && "$COAGENT" --provider faux -p first --faux-script '[{"text":"one"}]' >/dev/null 2>&1 )
( cd "$cdir" && "$COAGENT" --provider faux -c -p second --faux-log "$work/c.jsonl" >/dev/null 2>"$work/err.txt" ); rc=$?
check "-c: exit 0" [ $rc = 0 ]
check "-c: the history sent" contains "$work/c.jsonl" '"text":"first"'
( cd "$cdir" && setsid "$COAGENT" --provider faux -r -p third </dev/null >"$work/out.txt" 2>"$work/err.txt" ); rc=$?
check "-r without a terminal: exit 2" [ $rc = 2 ]
check "-r without a terminal: says so" contains "$work/err.txt" "--resume: picking a session needs a terminal"
contradiction "--resume --continue" "coagent: --resume and --continue cannot be used together" -r -c -p hi
# --list-models [PATTERN]: provider, id, context window, credential
"$COAGENT" --list-models >out.txt 2>err.txt; rc=$?
check "--list-models exit 0" [ $rc = 0 ]
check "--list-models header" bash -c "head -1 out.txt | grep -Eq '^provider +model +context +credential$'"
check "--list-models faux" grep -Eq '^faux +faux +128000 +not needed$' out.txt
check "--list-models built-in without a key" grep -Eq '^anthropic +claude-sonnet-4-5 +200000 +none$' out.txt
OPENAI_API_KEY=sk-test "$COAGENT" --list-models GPT-4O >out.txt 2>err.txt
check "--list-models PATTERN: matches, case-insensitive" grep -Eq '^openai +gpt-4o +128000 +OPENAI_API_KEY$' out.txt
check "--list-models PATTERN: only those" bash -c "! grep -q claude out.txt"
"$COAGENT" --list-models no-such-model >out.txt 2>err.txt; rc=$?
check "--list-models no match" equals out.txt 'no model matches "no-such-model"'
# the model when none is named: faux without any key, and one stderr line says so
"$COAGENT" --no-session -p hi >out.txt 2>err.txt; rc=$?
check "default: faux without a key" equals out.txt "Hello from the faux provider."
check "default: the stderr line" contains err.txt "coagent: using faux/faux (no API key found: the offline faux provider"
# with keys: anthropic first, then openai (both pointed at a closed port: no network)
pdir="$work/pick"; mkdir -p "$pdir/home"
echo '{"retry":{"maxRetries":0}}' > "$pdir/home/settings.json"
echo '{"providers":{"openai":{"baseUrl":"http://127.0.0.1:9/v1","allowInsecureHttp":true},"anthropic":{"baseUrl":"http://127.0.0.1:9/v1","allowInsecureHttp":true}}}' > "$pdir/home/models.json"
( cd "$pdir" && COAGENT_DIR="$pdir/home" OPENAI_API_KEY=sk-o "$COAGENT" --no-session -p hi >/dev/null 2>"$work/err.txt" )
check "default: openai with its key" contains "$work/err.txt" "coagent: using openai/gpt-4.1 (a key in OPENAI_API_KEY"
( cd "$pdir" && COAGENT_DIR="$pdir/home" OPENAI_API_KEY=sk-o ANTHROPIC_API_KEY=sk-a "$COAGENT" --no-session -p hi >/dev/null 2>"$work/err.txt" )
check "default: anthropic before openai" contains "$work/err.txt" "coagent: using anthropic/claude-sonnet-4-5 (a key in ANTHROPIC_API_KEY"
echo '{"retry":{"maxRetries":0},"defaultProvider":"openai","defaultModel":"gpt-4o"}' > "$pdir/home/settings.json"
( cd "$pdir" && COAGENT_DIR="$pdir/home" OPENAI_API_KEY=sk-o ANTHROPIC_API_KEY=sk-a "$COAGENT" --no-session -p hi >/dev/null 2>"$work/err.txt" )
check "default: defaultProvider/defaultModel" contains "$work/err.txt" "coagent: using openai/gpt-4o (defaultProvider in $pdir/home/settings.json"
echo '{"defaultProvider":7}' > "$pdir/home/settings.json"
( cd "$pdir" && COAGENT_DIR="$pdir/home" "$COAGENT" --no-session -p hi >/dev/null 2>"$work/err.txt" ); rc=$?
check "bad defaultProvider exit 2" [ $rc = 2 ]
check "bad defaultProvider named" contains "$work/err.txt" 'settings.json: key "defaultProvider": expected a string, found 7'
echo '{}' > "$pdir/home/settings.json"
( cd "$pdir" && COAGENT_DIR="$pdir/home" OPENAI_API_KEY=sk-o "$COAGENT" --provider faux --no-session -p hi >/dev/null 2>"$work/err.txt" ); rc=$?
check "--provider faux: no choice line" bash -c "! grep -q 'coagent: using' '$work/err.txt'"

# coagent limits with limits.store "local": auth.json's blocks, by fingerprint; --clear lifts them
ldir="$work/limits"
mkdir -p "$ldir"
future=$(( $(date +%s) * 1000 + 600000 ))
echo '{"fake":[{"type":"api_key","key":"sk-test-AAAA","blockedUntil":'$future'},{"type":"api_key","key":"sk-test-BBBB"}]}' >"$ldir/auth.json"
chmod 600 "$ldir/auth.json"
fp=$(printf %s sk-test-AAAA | sha256sum | cut -d' ' -f1)
COAGENT_DIR="$ldir" "$COAGENT" limits >lim.txt 2>lim.err; rc=$?
check "limits: exit 0" [ $rc = 0 ]
check "limits: the store" contains lim.txt "store: local"
check "limits: auth.json's block by fingerprint, with the time left" grep -qE "^  fake  $fp  (9m|10m)( [0-9]+s)? left  \(auth.json\)$" lim.txt
check "limits: never the key" bash -c "! grep -q sk-test lim.txt"
COAGENT_DIR="$ldir" "$COAGENT" limits --json >lim.json 2>lim.err; rc=$?
check "limits --json: exit 0" [ $rc = 0 ]
check "limits --json: the block" python3 -c "
import json,sys; o=json.load(open('lim.json'))
b=o['blockedCredentials']
assert o['store']=='local' and o['connected'] is True, o
assert len(b)==1 and b[0]['provider']=='fake' and b[0]['fingerprint']=='$fp' and b[0]['source']=='auth.json' and 590000<b[0]['leftMs']<=600000, b
assert o['modelCooldowns']==[] and o['budgets']==[] and o['activeSessions']==[], o"
COAGENT_DIR="$ldir" "$COAGENT" limits --clear --provider fake >clr.txt 2>clr.err; rc=$?
check "limits --clear: exit 0" [ $rc = 0 ]
check "limits --clear: says what it lifted" contains clr.txt "fake: 1 block lifted in $ldir/auth.json"
check "limits --clear: auth.json holds no block" bash -c "! grep -q blockedUntil '$ldir/auth.json'"
check "limits --clear: the keys kept" bash -c "grep -q sk-test-AAAA '$ldir/auth.json' && grep -q sk-test-BBBB '$ldir/auth.json'"
COAGENT_DIR="$ldir" "$COAGENT" limits --provider fake >/dev/null 2>clr.err; rc=$?
check "limits --provider without --clear: exit 2" [ $rc = 2 ]
check "limits --provider without --clear: why" contains clr.err "coagent limits: --provider needs --clear"
COAGENT_DIR="$ldir" "$COAGENT" limits --json --clear >/dev/null 2>clr.err; rc=$?
check "limits --json --clear: exit 2" [ $rc = 2 ]
"$COAGENT" limits --help >lhelp.txt 2>&1; rc=$?
check "limits --help: exit 0, the flags" bash -c "[ $rc = 0 ] && grep -q -- '--clear' lhelp.txt && grep -q -- '--provider' lhelp.txt && grep -q fingerprint lhelp.txt"
echo '{"limits":{"store":"nope"}}' >"$ldir/settings.json"
COAGENT_DIR="$ldir" "$COAGENT" limits >/dev/null 2>clr.err; rc=$?
check "limits: a bad settings file exits 2 naming the key" bash -c "[ $rc = 2 ] && grep -q 'limits.store' clr.err"
# --image FILE (issue 24): repeatable, the type from the first bytes, base64 in the user message
printf '\x89PNG\r\n\x1a\nabc' > "$work/a.png"
printf 'GIF89a..' > "$work/b.gif"
echo 'not an image' > "$work/c.png"
"$COAGENT" --provider faux --no-session --mode json -p look --image "$work/a.png" "--image=$work/b.gif" --faux-log "$work/img.jsonl" >out.txt 2>err.txt; rc=$?
check "--image: exit 0" [ $rc = 0 ]
check "--image: the faux provider got two images" contains "$work/img.jsonl" '"messages":[{"role":"user","text":"look","images":2}]'
check "--image: the user message holds them in the reference's shape" contains out.txt '"content":[{"type":"text","text":"look"},{"type":"image","data":"iVBORw0KGgphYmM=","mimeType":"image/png"},{"type":"image","data":"R0lGODlhLi4=","mimeType":"image/gif"}]'
"$COAGENT" --provider faux --no-session --image "$work/a.png" "with a MESSAGE" --faux-log "$work/img2.jsonl" >out.txt 2>err.txt; rc=$?
check "--image before MESSAGE takes one file" contains "$work/img2.jsonl" '"text":"with a MESSAGE","images":1'
"$COAGENT" --provider faux --no-session -p x --image "$work/c.png" >out.txt 2>err.txt; rc=$?
check "--image: not an image exit 2" [ $rc = 2 ]
check "--image: not an image names the file" contains err.txt "coagent: --image $work/c.png: not a PNG, JPEG, GIF or WebP image"
"$COAGENT" --provider faux --no-session -p x --image "$work/missing.png" >out.txt 2>err.txt; rc=$?
check "--image: missing file exit 2" [ $rc = 2 ]
check "--image: missing file named" contains err.txt "coagent: --image $work/missing.png: no such file"
"$COAGENT" --provider faux --mode rpc --image "$work/a.png" >out.txt 2>err.txt; rc=$?
check "--image with --mode rpc exit 2" [ $rc = 2 ]
check "--image with --mode rpc refused" contains err.txt "--image and --mode rpc cannot be used together"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
