#!/usr/bin/env bash
# Image attachments (issue 24): `@FILE` in the input attaches an image, as the reference's
# `pi @shot.png`; a dropped file (its path pasted) becomes such a word. coagent on
# coagent-fakellm (Anthropic Messages): the request that reached it carried the image (its
# --log counts the image blocks); a missing, non-image or too large file is an error line
# naming it, nothing is sent and the message stays in the input.
# Usage: image.sh <path to coagent> <path to coagent-fakellm>
source "$(dirname "$0")/lib.sh" "$1" "$2"
# a 1x1 PNG
printf '\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb0\x00\x00\x00\x00IEND\xaeB`\x82' > "$work/shot.png"
cp "$work/shot.png" "$work/my shot.png"
echo "not an image" > "$work/fake.png"
truncate -s 21M "$work/big.png"
start_fakellm '[{"text":"A red dot."},{"text":"The same dot."},{"text":"First dot."}]'
start_coagent '[]' 100 30

# the marker while typing: the status line names the image
T send-keys -t main -l -- "what is @shot.png"
wait_for "1 image: shot.png · "
T send-keys -t main Enter
wait_for "A red dot."
expect screen_has "> what is @shot.png"
expect screen_has "  [image: image/png, $(stat -c %s "$work/shot.png") B]"
expect [ "$(fake_requests)" = 1 ]
expect grep -q '"request":1,.*"roles":\["user"\],"images":1,' "$work/fake.log"
wait_gone "1 image: shot.png"

# errors name the file; nothing is sent, the input is kept
for bad in "missing.png|no such file" "fake.png|not a PNG, JPEG, GIF or WebP image" \
           "big.png|22020096 bytes, more than the 20971520 an image may have"; do
  file=${bad%%|*} why=${bad#*|}
  type_line "look at @$file"
  wait_for "Not sent: $file: $why"
  expect input_is "look at @$file"
  T send-keys -t main C-u
  wait_gone "1 image: $file"
done
expect [ "$(fake_requests)" = 1 ]

# a dropped file: its path pasted (quoted, as terminals do) becomes an @ word
printf "'%s'" "$work/my shot.png" > "$work/drop.txt"
T load-buffer -b d "$work/drop.txt"
T paste-buffer -p -b d -t main
wait_for "1 image: my shot.png"
T send-keys -t main -l -- "again"
expect input_is "@\"$work/my shot.png\" again"
T send-keys -t main Enter
wait_for "The same dot."
expect grep -q '"request":2,.*"images":2,' "$work/fake.log"  # this one and the first turn's
T send-keys -t main C-d
wait_for "EXIT=0"
stop_coagent

# `coagent MESSAGE`: the first message attaches its images too; an error puts it in the input
COAGENT_ARGS="--no-session 'first @missing.png'" START_TEXT="Not sent: missing.png: no such file" \
  start_coagent '[]' 100 30
expect input_is "first @missing.png"
expect [ "$(fake_requests)" = 2 ]
T send-keys -t main C-d C-u C-d
wait_for "EXIT=0"
stop_coagent
COAGENT_ARGS="--no-session 'first @shot.png'" START_TEXT="First dot." start_coagent '[]' 100 30
expect grep -q '"request":3,.*"images":1,' "$work/fake.log"
finish 0
