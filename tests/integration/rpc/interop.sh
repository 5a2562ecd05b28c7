#!/bin/sh
# ctest rpc_interop_reference_client: installs the reference agent's npm package into CACHE
# when it is missing, then runs interop.mjs (its RpcClient driving coagent through cli.js).
# Usage: interop.sh CACHE_DIR COAGENT_BIN FAKELLM_BIN. Fails, never skips, when something is
# missing.
set -u
cache="$1"
bin="$2"
fakellm="$3"
here=$(cd "$(dirname "$0")" && pwd)
pkg_name="@mariozechner/pi-coding-agent"
pkg_version="0.73.1"
pkg_json="$cache/node_modules/$pkg_name/package.json"

fail() {
    echo "rpc interop FAILED: $*" >&2
    exit 1
}

command -v node >/dev/null 2>&1 || fail "node is not installed (node >= 20 is needed to run the reference RpcClient)"
if ! grep -q "\"version\": \"$pkg_version\"" "$pkg_json" 2>/dev/null; then
    command -v npm >/dev/null 2>&1 || fail "npm is not installed, cannot install $pkg_name@$pkg_version"
    mkdir -p "$cache" || fail "cannot create $cache"
    [ -f "$cache/package.json" ] || echo '{"name":"coagent-rpc-interop","private":true}' >"$cache/package.json"
    echo "rpc interop: installing $pkg_name@$pkg_version into $cache" >&2
    (cd "$cache" && npm install --no-audit --no-fund "$pkg_name@$pkg_version" >&2) ||
        fail "npm could not install $pkg_name@$pkg_version into $cache (no network or no registry access?); this test needs the reference package and does not skip"
    grep -q "\"version\": \"$pkg_version\"" "$pkg_json" 2>/dev/null || fail "$pkg_json is missing after npm install"
fi
exec node "$here/interop.mjs" "$cache" "$bin" "$fakellm"
