#!/usr/bin/env bash
# The repository stands on its own: no tracked file reads or cites a path outside it (the team
# notes and specification drafts beside a developer's checkout are not there in a user's clone).
# A cheap text check over the tracked files (a plain directory walk outside a git checkout).
# Usage: standalone.sh <source dir>
set -uo pipefail
src=$(realpath "$1")
cd "$src" || exit 2
self=tests/integration/standalone.sh
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list() { git ls-files -z; }
else
  list() { find . -type f -not -path './build*' -not -path './.git/*' -printf '%P\0'; }
fi
# the team folder beside a developer's checkout (one level up, "shared") and the files that
# lived there; a relative path that climbs out of the tree to a markdown or data file;
# absolute paths of a developer's machine
up='\.\.'  # the pattern is assembled so that this file does not match it
pattern="$up/shared|"'(^|[^/a-z_-])(design|conventions|pi-reference)\.md|(^|[^a-z/])spec/retry-policy\.md|shared/(data|spec|reference|hooks)/|/work/|\.\./\.\./\.\./[A-Za-z]'
hits=$(list | grep -zv -e "^$self\$" | xargs -0 grep -nIE "$pattern" -- 2>/dev/null || true)
# every link to a markdown file inside docs/ and README.md must resolve inside the tree
broken=""
while IFS= read -r -d '' f; do
  dir=$(dirname "$f")
  while IFS= read -r target; do
    t=${target%%#*}
    [ -z "$t" ] && continue
    case "$t" in http://*|https://*|mailto:*) continue ;; esac
    resolved=$(realpath -m "$dir/$t")
    case "$resolved" in "$src"/*) ;; *) broken+="$f: link leaves the repository: $target"$'\n'; continue ;; esac
    [ -e "$resolved" ] || broken+="$f: link to a missing file: $target"$'\n'
  done < <(grep -oE '\[[^]]+\]\([^) ]+\)' "$f" | sed -E 's/^.*\]\((.*)\)$/\1/')
done < <(list | grep -zE '(^README\.md|\.md)$')
status=0
if [ -n "$hits" ]; then
  echo "tracked files refer to paths outside the repository:" >&2
  echo "$hits" >&2
  status=1
fi
if [ -n "$broken" ]; then
  printf '%s' "$broken" >&2
  status=1
fi
[ $status = 0 ] && echo "standalone: no tracked file refers to a path outside the repository"
exit $status
