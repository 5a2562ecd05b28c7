#!/usr/bin/env bash
# The CI steps beyond the ASan+UBSan suite of scripts/test.sh (issue 7, docs/reliability.md):
#  1. ThreadSanitizer: a g++ -fsanitize=thread tree (build-tsan/) of tests/unit/test_threads.cpp
#     only — sessions on a thread pool behind strands, poked from other threads.
#  2. Fuzz smoke: a clang++ tree (build-fuzz/) of the libFuzzer targets in fuzz/, each run for
#     COAGENT_FUZZ_SECONDS (20) from the checked-in corpus; a crash, leak, timeout (5 s per
#     input) or more than 2 GiB of memory fails the run. `fuzz/run` runs them long.
# Budget: about 12 minutes on 2 cores from scratch (printed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=${COAGENT_BUILD_JOBS:-$(nproc)}
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }

# ---- 1. ThreadSanitizer ------------------------------------------------------------------------
# Debug: g++ 12 warns falsely (-Wmismatched-new-delete) on Asio's frame allocator from -O1 on.
# TSan does not model std::atomic_thread_fence (g++: -Wtsan), which Asio uses in its fenced
# blocks and in its std::atomic reference counts: this tree builds Asio without both (its
# reference counts then use __atomic builtins TSan understands; handler invocation is ordered by
# the scheduler's mutex), so a fence can neither hide a race nor report a false one.
# (CMakePresets.json "tsan" sets these flags)
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j"$jobs"
echo "ci-extra: TSan build done at $(elapsed)" >&2
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4" \
  ./build-tsan/bin/coagent_thread_tests
echo "ci-extra: TSan run done at $(elapsed)" >&2

# ---- 2. fuzz smoke -----------------------------------------------------------------------------
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$jobs"
echo "ci-extra: fuzz build done at $(elapsed)" >&2
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
seconds=${COAGENT_FUZZ_SECONDS:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for dir in fuzz/corpus/*/; do
  t=$(basename "$dir")
  mkdir -p "$work/$t" build-fuzz/fuzz-artifacts/"$t"
  if ./build-fuzz/bin/fuzz_"$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=5 \
       -dict=fuzz/json.dict -artifact_prefix=build-fuzz/fuzz-artifacts/"$t"/ -print_final_stats=1 \
       "$work/$t" "$dir" >"$work/$t.log" 2>&1; then
    echo "ci-extra: fuzz $t: $(grep -m1 '^stat::number_of_executed_units' "$work/$t.log" | awk '{print $2}') runs in ${seconds} s, ok"
  else
    failed=$((failed + 1))
    echo "ci-extra: fuzz $t FAILED (artifact in build-fuzz/fuzz-artifacts/$t/):" >&2
    grep -E -A30 "ERROR|invariant failed|SUMMARY" "$work/$t.log" | head -60 >&2 || tail -40 "$work/$t.log" >&2
  fi
done
echo "ci-extra: done in $(elapsed)" >&2
[ "$failed" = 0 ]
