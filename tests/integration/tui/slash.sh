#!/usr/bin/env bash
# Slash commands (issue 23): /help, Tab completion, an unknown command stays local, /model's
# list, /settings with where each value came from, /retry resending a failed prompt, /compact,
# /new; Esc while streaming puts a queued follow-up back into the input; the input wraps at word
# boundaries; a second Ctrl+C exits only within 2 s of the first; /quit.
source "$(dirname "$0")/lib.sh" "$1"
settings '{"retry":{"baseDelayMs":1},"compaction":{"keepRecentTokens":0}}'
start_coagent '[{"error":"400 bad request","status":400},{"text":"Resent ok."},{"text":"SUMMARY"},{"text":"alpha beta gamma delta epsilon zeta","stallMs":60000}]' 80 40

# /help lists the commands
type_line "/help"
wait_for "Commands (Tab completes a name):"
expect screen_has "/autoretry on|off"
expect screen_has "/quit "

# Tab completes a command's name; two candidates go to the status line
T send-keys -t main -l "/mo"
T send-keys -t main Tab
wait_for "> /model"
T send-keys -t main C-u
T send-keys -t main -l "/re"
T send-keys -t main Tab
wait_for "/resume  /retry"
T send-keys -t main C-u

# an unknown command is a local error, nothing reaches the model
type_line "/frobnicate this"
wait_for "Unknown command: /frobnicate"
expect [ "$(requests)" = 0 ]

# /model without an argument: a numbered list; Esc cancels it
type_line "/model"
wait_for "1. faux/faux  (in use)"
T send-keys -t main Escape
wait_for "Cancelled"
# /model provider/id switches (the footer follows); an unknown one is refused, locally
type_line "/model nope/x"
wait_for "Model not changed:"
type_line "/model faux/faux"
wait_for "Model: faux/faux"
# the list picks by number
type_line "/model"
wait_for "a number and enter: pick"
type_line "1"
wait_gone "a number and enter: pick"
expect [ "$(everything | grep -c '^Model: faux/faux$')" = 2 ]
expect [ "$(requests)" = 0 ]

# /settings: the effective value and where it came from
type_line "/settings"
wait_for "retry.maxRetries = 3  (default)"
expect screen_has "retry.baseDelayMs = 1  ($COAGENT_DIR/settings.json)"

# /retry: the last failed prompt is sent again
type_line "question"
wait_for "Error: 400 bad request"
type_line "/retry"
wait_for "Resent ok."
expect [ "$(requests)" = 2 ]
# (the failed turn's user message stays in the conversation, as in the session file)
expect grep -q '"request":2,"messages":\[{"role":"user","text":"question"},{"role":"user","text":"question"}\]' "$work/faux.log"

# /compact: the conversation summarised
type_line "/compact keep it short"
wait_for "Context compacted"
expect [ "$(requests)" = 3 ]

# Esc while streaming with a queued follow-up: the follow-up comes back into the input
type_line "stream now"
wait_for "Working"
type_line "the queued one"
wait_for "Queued: the queued one"
T send-keys -t main Escape
wait_for "Aborted"
wait_gone "Queued:"
expect input_is "the queued one"
expect_not_in_screen "Queued message dropped"
expect [ "$(requests)" = 4 ]
T send-keys -t main C-u

# the input wraps at word boundaries (80 columns: 78 for the text)
T send-keys -t main -l "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho"
wait_for "  omicron pi rho"
expect [ "$(screen | grep -F "> alpha beta")" = "> alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi" ]
T send-keys -t main C-u

# /new: a fresh session, the screen drawn again without the old conversation
type_line "/new"
wait_for "New session (in memory)"
expect_not_in_screen "Resent ok."

# Ctrl+C twice: only within 2 s of the first
T send-keys -t main C-c
wait_for "Press Ctrl+C again to exit"
wait_gone "Press Ctrl+C again to exit" 5
T send-keys -t main C-c
wait_for "Press Ctrl+C again to exit"
expect_not_in_screen "EXIT="

# /quit
type_line "/quit"
wait_for "EXIT=0"
if ls "$work"/asan* "$work"/ubsan* >/dev/null 2>&1; then cat "$work"/asan* "$work"/ubsan* >&2; fail "sanitizer report"; fi
echo ok
