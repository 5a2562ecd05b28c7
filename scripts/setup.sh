#!/usr/bin/env bash
# Installs the Debian 12 packages coagent needs, when missing. Idempotent: quick when all
# are present. Needs root (or sudo) only when something must be installed.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config git ca-certificates openssl
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev libboost-filesystem1.81-dev
  catch2 libspdlog-dev libfmt-dev libssl-dev libre2-dev libcli11-dev libbenchmark-dev
  libedit-dev libncurses-dev tmux doxygen gnuplot-nox libcmark-gfm-dev libcmark-gfm-extensions-dev
  clang libclang-rt-14-dev prometheus-cpp-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node >= 20 runs the reference agent for the interop test and the side-by-side benchmark;
# the machine image ships it (NodeSource). Debian's own nodejs is the fallback.
command -v node >/dev/null 2>&1 || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present" >&2
