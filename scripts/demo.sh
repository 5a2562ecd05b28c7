#!/usr/bin/env bash
# Sets everything up, builds the release tree in build/ and runs the demo: one prompt on the
# embedded faux provider that meets two retryable errors (503, then 429) and then succeeds.
# The demo settings (examples/demo/settings.json) lower retry.baseDelayMs to 500 ms so the
# backoff (0.5 s, then 1 s) is short enough to watch.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release >/dev/null   # CMakePresets.json: build/, Release, no tests
cmake --build --preset release -j"$(nproc)" --target coagent
echo
# a piped stdin would be read as part of the prompt: the demo reads none
exec </dev/null
# shown and run exactly as the README's "What the demo shows" has it (ctest readme_demo checks)
echo "\$ COAGENT_DIR=examples/demo build/bin/coagent --no-session -p 'Say hello' --provider faux --faux-script examples/demo/script.json"
COAGENT_DIR=examples/demo build/bin/coagent --no-session -p 'Say hello' --provider faux --faux-script examples/demo/script.json
