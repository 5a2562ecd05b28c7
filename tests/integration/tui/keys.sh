#!/usr/bin/env bash
# Keys and text: Ctrl+C clears, twice in a row exits; history; multi-line input and paste; wide
# characters laid out by display width; escape sequences from a model shown harmlessly; resize.
source "$(dirname "$0")/lib.sh" "$1"

# not a terminal, an empty stdin and no prompt: a usage line, exit 2
out=$("$COAGENT" --provider faux --no-session < /dev/null 2>&1); rc=$?
expect [ "$rc" = 2 ]
expect [ "$out" = "coagent: no prompt: stdin is not a terminal and gave no text
usage: coagent [OPTIONS] [MESSAGE] | coagent -p MESSAGE | echo MESSAGE | coagent | coagent --mode rpc   (coagent --help for the flags)" ]
# --mode interactive without a terminal: the old message
out=$("$COAGENT" --provider faux --no-session --mode interactive < /dev/null 2>&1); rc=$?
expect [ "$rc" = 2 ]
expect [ "$out" = "coagent: not a terminal. Use -p MESSAGE for one prompt, or --mode rpc to drive coagent over JSON lines." ]

start_coagent '[{"text":"中文字符测试中文字符测试中文字符测试中文字符测试中文字符测试 end"},{"text":"red \u001b[31mtext\u001b[0m and \u001b[2J no clear"},{"text":"multi ok"},{"error":"503 not retried now","status":503}]' 40 20

# the cursor follows display width in the input: "> " + two CJK characters = column 6
T send-keys -t main -l "中文"
wait_for "> 中文"
expect [ "$(T display -p -t main '#{cursor_x}')" = 6 ]
T send-keys -t main C-u
wait_gone "> 中文"

# wide characters wrap by display width (40 columns: 20 CJK characters per row)
type_line "wide"
wait_for "end"
rows=$(everything | grep -F '中文字符')
expect [ "$(echo "$rows" | head -n 1)" = "中文字符测试中文字符测试中文字符测试中文" ]
expect [ "$(echo "$rows" | sed -n 2p)" = "字符测试中文字符测试 end" ]

# a model's escape sequences are not obeyed: the screen is not cleared, ESC shows as U+FFFD
type_line "escapes"
wait_for "no clear"
expect screen_has "red �[31mtext�[0m and �[2J no clear"
expect screen_has "中文字符测试中文字符测试中文字符测试中文"

# multi-line input (Ctrl+J) and a bracketed paste, sent as one message
T send-keys -t main -l "line one"
T send-keys -t main C-j
printf 'pasted two\npasted three' > "$work/paste.txt"
T load-buffer -b p "$work/paste.txt"
T paste-buffer -p -b p -t main
wait_for "  pasted three"
T send-keys -t main Enter
wait_for "multi ok"
expect grep -q '"text":"line one\\npasted two\\npasted three"' "$work/faux.log"

# history: Up brings back the last message
T send-keys -t main Up
wait_for "  pasted three"
# Ctrl+C clears the input and arms the exit
T send-keys -t main C-c
wait_for "Press Ctrl+C again to exit"
expect input_is ""
# another key disarms it
T send-keys -t main -l "x"
wait_gone "Press Ctrl+C again"
T send-keys -t main BSpace

# a narrower window re-wraps the transcript (no stale rows, one status line)
T resize-window -t main -x 30 -y 20
wait_for "中文字符测试中文字符测试中文字"
expect [ "$(screen | grep -c 'enter: send')" = 1 ]
expect [ "$(screen | grep -c '^> *$')" = 1 ]

# /autoretry off: persisted to the global settings, and the next retryable error is final
type_line "/autoretry off"
wait_for "Auto-retry is off (saved to"
expect grep -q '"enabled": *false' "$COAGENT_DIR/settings.json"
type_line "fails"
wait_for "Error: 503 not retried now"
expect_not_in_screen "Retrying"

# Ctrl+C twice in a row exits with 0
T send-keys -t main C-c
wait_for "Press Ctrl+C again to exit"
T send-keys -t main C-c
wait_for "EXIT=0"
if ls "$work"/asan* "$work"/ubsan* >/dev/null 2>&1; then cat "$work"/asan* "$work"/ubsan* >&2; fail "sanitizer report"; fi
echo ok
