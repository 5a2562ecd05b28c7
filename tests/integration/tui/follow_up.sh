#!/usr/bin/env bash
# A message typed while the agent is busy is shown as queued and runs after the turn, with the
# first exchange in its context.
source "$(dirname "$0")/lib.sh" "$1"
start_coagent '[{"text":"First answer.","delayMs":2000},{"text":"Second answer."}]'

type_line "first question"
wait_for "Working…"
type_line "second question"
wait_for "Queued: second question"
wait_for "1 queued"
expect [ "$(requests)" = 1 ]
wait_for "Second answer." 15
wait_gone "Queued:"
# in order: question, answer, question, answer
order=$(everything | grep -E '^> (first|second) question|^(First|Second) answer\.' | tr '\n' '|')
expect [ "$order" = "> first question|First answer.|> second question|Second answer.|" ]
expect grep -q '"request":2,"messages":\[{"role":"user","text":"first question"},{"role":"assistant","text":"First answer.","stopReason":"stop"},{"role":"user","text":"second question"}\]' "$work/faux.log"
finish 0
