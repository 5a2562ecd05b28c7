#!/usr/bin/env bash
# Installs the reference agent, @mariozechner/pi-coding-agent 0.73.1, with npm into
# .cache/peer-bench/pi-0.73.1/ (or $COAGENT_PEER_CACHE) when it is missing, and prints the
# directory of its package on stdout. bench/peer/run (its CLI) and bench/scale/run (its SDK) use
# it. Needs node >= 20.6, and registry access once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg_name="@mariozechner/pi-coding-agent"
pkg_version="0.73.1"
cache="${COAGENT_PEER_CACHE:-$root/.cache/peer-bench}/pi-$pkg_version"
pkg_dir="$cache/node_modules/$pkg_name"
command -v node >/dev/null || { echo "reference-sdk.sh: node (>= 20.6) is needed for the reference agent" >&2; exit 1; }
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&b>=6)?0:1)' ||
    { echo "reference-sdk.sh: node $(node --version) is too old; the reference needs >= 20.6" >&2; exit 1; }
if ! grep -q "\"version\": \"$pkg_version\"" "$pkg_dir/package.json" 2>/dev/null; then
    command -v npm >/dev/null || { echo "reference-sdk.sh: npm is needed to install $pkg_name@$pkg_version" >&2; exit 1; }
    mkdir -p "$cache"
    [ -f "$cache/package.json" ] || echo '{"name":"coagent-peer-bench","private":true}' >"$cache/package.json"
    echo "reference-sdk.sh: installing $pkg_name@$pkg_version into $cache" >&2
    (cd "$cache" && npm install --no-audit --no-fund "$pkg_name@$pkg_version" >&2) ||
        { echo "reference-sdk.sh: npm could not install $pkg_name@$pkg_version (no registry access?)" >&2; exit 1; }
fi
echo "$pkg_dir"
