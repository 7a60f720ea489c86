#!/usr/bin/env bash
# The test command: setup, the layout check, Release build, the test suites
# under CTest; then the clang ASan/UBSan build with its tests and a short run
# of every fuzz target.
#   scripts/test.sh           everything
#   scripts/test.sh --quick   setup + Release build + tests only
# A failing stage does not stop the ones that do not depend on it (a failing
# test suite still lets the sanitizer build and the fuzz runs go); a summary of
# every stage comes at the end, and the exit status is 1 if any failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache keys paths under the checkout as relative ones (as scripts/build.sh).
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
quick=0
[ "${1:-}" = "--quick" ] && quick=1
t0=$(date +%s)
results=()
failed=0

# run_stage NAME COMMAND...: runs COMMAND and records whether it passed and how long it took.
run_stage() {
  local name=$1 start rc=0
  shift
  echo "== $name ($(date +%T))"
  start=$(date +%s)
  "$@" || rc=$?
  local took=$(($(date +%s) - start))
  if [ "$rc" = 0 ]; then
    results+=("pass  $name (${took} s)")
  else
    results+=("FAIL  $name (exit $rc after ${took} s)")
    failed=1
  fi
  return "$rc"
}
skip() { results+=("skip  $1 ($2)"); }
finish() {
  echo "== summary ($(($(date +%s) - t0)) s in all)"
  printf '%s\n' "${results[@]}"
  exit "$failed"
}

release_tests() { ctest --test-dir build --output-on-failure -j 2; }
sanitizer_build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
    -DBRAID_SANITIZE=ON -DBRAID_FUZZ=ON -DBRAID_CUDA=OFF "${launcher[@]}" >/dev/null &&
    cmake --build build-asan -j "$(nproc)"
}
sanitizer_tests() {
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j 2 -LE heavy -E engine_runner_tests
}
# The serving engine under the sanitizers, without the long parity and
# batching workloads (those run in the Release stage).
sanitizer_engine() {
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build-asan/engine/engine_runner_tests \
    -tce="*matches transformers*,*batched greedy*,*1,000-token*,*speculative greedy output equals*,*serving speculative greedy*"
}

run_stage setup scripts/setup.sh --dev || finish
run_stage "layout (.clang-format)" scripts/check_format.sh || true
if run_stage "release build" scripts/build.sh; then
  run_stage "release tests" release_tests || true
else
  skip "release tests" "no build"
fi
[ $quick = 1 ] && finish

if run_stage "sanitizer + fuzz build (clang-16, ASan/UBSan)" sanitizer_build; then
  run_stage "sanitizer tests" sanitizer_tests || true
  run_stage "sanitizer serving engine" sanitizer_engine || true
  run_stage "fuzz runs" scripts/fuzz.sh build-asan "${BRAID_FUZZ_SECONDS:-30}" || true
else
  for s in "sanitizer tests" "sanitizer serving engine" "fuzz runs"; do skip "$s" "no build"; done
fi
finish
