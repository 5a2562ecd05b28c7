#!/usr/bin/env bash
# Thinking blocks (issue 24): coagent on coagent-fakellm (Anthropic Messages, thinking deltas)
# shows the model's thinking dimmed and folded to one line, names Ctrl+T in the status line;
# Ctrl+T draws the transcript again with every thinking block whole (line breaks kept, a
# header row), a second Ctrl+T folds them again; the session resumed shows its thinking
# folded again, and Ctrl+T expands it; that choice is saved (tui.expandThinking) for the
# next start.
# Usage: thinking.sh <path to coagent> <path to coagent-fakellm>
source "$(dirname "$0")/lib.sh" "$1" "$2"
start_fakellm '[{"thinking":"First I look at the picture closely. It shows a small red logo on a white field, drawn by hand with a thick brush.","text":"A logo."},{"thinking":"Second thoughts.","text":"Still a logo."}]'
COAGENT_ARGS="--session-dir $work/sessions" start_coagent '[]' 80 30
type_line "what is it"
wait_for "A logo."
wait_for "ctrl+t: expand thinking"
# folded: one row, cut with an ellipsis at the width
expect screen_has "✻ Thinking: First I look at the picture closely. It shows a small red logo on a…"
expect_not_in_screen "thick brush"
T send-keys -t main C-t
wait_for "Thinking blocks: expanded (ctrl+t folds them)"
wait_for "thick brush."
expect screen_has "✻ Thinking:"
expect screen_has "  First I look at the picture closely. It shows a small red logo on a white"
expect screen_has "  field, drawn by hand with a thick brush."
expect_not_in_screen "on a…"
expect screen_has "A logo."
expect input_is ""
# expanded stays for the next reply, while it streams and after
type_line "again"
wait_for "Still a logo."
expect screen_has "  Second thoughts."
expect [ "$(everything | grep -c 'thick brush')" = 1 ]  # drawn again, not twice
T send-keys -t main C-t
wait_for "Thinking blocks: folded (ctrl+t expands them)"
wait_for "✻ Thinking: Second thoughts."
wait_gone "thick brush"
expect screen_has "✻ Thinking: First I look at the picture closely. It shows a small red logo on a…"
expect screen_has "A logo."
# the second request sent the signed thinking back
expect grep -q '"thinking":1' "$work/fake.log"
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent

# the session resumed: its thinking blocks folded (the default again), Ctrl+T expands them
COAGENT_ARGS="--continue --session-dir $work/sessions" START_TEXT="Still a logo." start_coagent '[]' 80 30
expect screen_has "✻ Thinking: First I look at the picture closely. It shows a small red logo on a…"
expect screen_has "✻ Thinking: Second thoughts."
wait_for "ctrl+t: expand thinking"
T send-keys -t main C-t
wait_for "  field, drawn by hand with a thick brush."
# the choice is saved (tui.expandThinking) and the next start shows thinking whole at once
expect grep -q '"expandThinking": *true' "$COAGENT_DIR/settings.json"
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent
COAGENT_ARGS="--continue --session-dir $work/sessions" START_TEXT="Still a logo." start_coagent '[]' 80 30
expect screen_has "  field, drawn by hand with a thick brush."
expect screen_has "ctrl+t: fold thinking"
finish 0
