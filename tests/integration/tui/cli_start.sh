#!/usr/bin/env bash
# The command line into the interactive UI (issue 23): `coagent MESSAGE` on a terminal starts the
# UI with that message sent; `coagent -r` numbers this directory's recent sessions and resumes
# the one picked.
source "$(dirname "$0")/lib.sh" "$1"

# MESSAGE on a terminal: the interactive UI, its first prompt already sent
COAGENT_ARGS="--no-session 'first words'" start_coagent '[{"text":"Answer to the first words."}]'
wait_for "Answer to the first words."
expect screen_has "> first words"
expect [ "$(requests)" = 1 ]
expect input_is ""
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent

# -r: two sessions of this directory, newest first; the second one picked
( cd "$work" && "$COAGENT" --provider faux -p "older question" --faux-script '[{"text":"older answer"}]' >/dev/null 2>&1 )
touch -d '1 hour ago' "$COAGENT_DIR"/sessions/*.jsonl
( cd "$work" && "$COAGENT" --provider faux -p "newer question" --faux-script '[{"text":"newer answer"}]' >/dev/null 2>&1 )
COAGENT_ARGS="-r" START_TEXT="Resume which [1-2]?" start_coagent '[{"text":"continued"}]'
expect screen_has "Recent sessions of $work:"
expect [ "$(screen | grep -E '^1\. .*  newer question$' | wc -l)" = 1 ]
expect [ "$(screen | grep -E '^2\. .*  older question$' | wc -l)" = 1 ]
T send-keys -t main -l "2"
T send-keys -t main Enter
wait_for "Enter sends"
wait_for "older answer"
expect_not_in_screen "> newer question"
type_line "and now"
wait_for "continued"
expect grep -q '"messages":\[{"role":"user","text":"older question"},{"role":"assistant","text":"older answer","stopReason":"stop"},{"role":"user","text":"and now"}\]' "$work/faux.log"

# /resume inside the UI: the other session of this directory, picked by number
type_line "/resume"
wait_for "Recent sessions of $work (a number and Enter picks):"
picked=$(screen | sed -n '/a number and Enter picks/,$p')
expect [ "$(echo "$picked" | grep -cE '^1\. .*  newer question$')" = 1 ]
expect [ "$(echo "$picked" | grep -cE '^2\. ')" = 0 ]
type_line "1"
wait_for "Resumed"
wait_for "newer answer"
expect_not_in_screen "and now"
finish 0
