#!/usr/bin/env bash
# Markdown replies (issue 23): headings, emphasis, lists, quotes, fenced code, tables and links
# rendered with cmark-gfm, each finished block printed into the scrollback once; --no-markdown
# (and tui.markdown false) shows the text as written.
source "$(dirname "$0")/lib.sh" "$1"
reply='Intro text.\n\n# Release notes\n\nThe **retry** loop is *done*, see [the docs](https://example.org/docs).\n\n- first item\n- second item\n\n> a quoted line\n\n```sh\nmake test\n```\n\n| name | value |\n|------|-------|\n| a    | 1     |\n'
start_coagent "[{\"text\":\"$reply\"},{\"text\":\"**plain** now\"}]"
type_line "notes"
wait_for "└"
expect screen_has "Release notes"
expect_not_in_screen "# Release notes"
expect screen_has "The retry loop is done, see the docs (https://example.org/docs)."
expect screen_has "• first item"
expect screen_has "• second item"
expect screen_has "│ a quoted line"
expect screen_has "  make test"
expect_not_in_screen '```'
expect screen_has "│ name │ value │"
expect screen_has "├──────┼───────┤"
expect screen_has "│ a    │ 1     │"
# each block once in the scrollback
expect [ "$(everything | grep -c 'first item')" = 1 ]
expect [ "$(everything | grep -c 'Release notes')" = 1 ]
# bold and the code block's colour reach the terminal as attributes, not as text
styled=$(T capture-pane -e -p -t main)
expect grep -qE $'\e\\[(0;)?1mRelease notes' <<<"$styled"
expect grep -qE $'\e\\[36mmake test' <<<"$styled"
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent

# --no-markdown: the reply as written
COAGENT_ARGS="--no-session --no-markdown" start_coagent '[{"text":"**plain** and `code`"}]'
type_line "raw"
wait_for '**plain** and `code`'
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent

# tui.markdown false: the same
settings '{"tui":{"markdown":false}}'
start_coagent '[{"text":"# not a heading"}]'
type_line "raw"
wait_for "# not a heading"
finish 0
