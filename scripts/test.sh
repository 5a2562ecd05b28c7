#!/usr/bin/env bash
# Sets everything up, builds the test tree (build-test/: -Werror, AddressSanitizer +
# UndefinedBehaviorSanitizer) and runs every test with ctest. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
start=$(date +%s)
cmake --preset asan >/dev/null   # CMakePresets.json: Debug, -Werror, ASan+UBSan, benchmarks
cmake --build --preset asan -j"$(nproc)"
echo "test.sh: build took $(( $(date +%s) - start )) s" >&2
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --preset asan -j"$(nproc)"
echo "test.sh: done in $(( $(date +%s) - start )) s" >&2
