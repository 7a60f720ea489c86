#!/usr/bin/env bash
# The test command: setup, Release build, the test suites under CTest; then the
# clang ASan/UBSan build with its tests and a short run of every fuzz target.
#   scripts/test.sh           everything
#   scripts/test.sh --quick   setup + Release build + tests only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
stage() { echo "== $1 ($(date +%T))"; }
t0=$(date +%s)

stage setup
scripts/setup.sh --dev

stage "release build"
scripts/build.sh
stage "release tests"
ctest --test-dir build --output-on-failure -j 2
echo "release stage took $(( $(date +%s) - t0 )) s"

[ $quick = 1 ] && exit 0

t1=$(date +%s)
stage "sanitizer + fuzz build (clang-16, ASan/UBSan)"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
  -DBRAID_SANITIZE=ON -DBRAID_FUZZ=ON -DBRAID_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build build-asan -j "$(nproc)"
stage "sanitizer tests"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 -LE heavy -E engine_runner_tests
# The serving engine under the sanitizers, without the long parity and
# batching workloads (those run in the Release stage).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  build-asan/engine/engine_runner_tests \
  -tce="*matches transformers*,*batched greedy*,*1,000-token*,*speculative greedy output equals*,*serving speculative greedy*"
stage "fuzz runs"
scripts/fuzz.sh build-asan "${BRAID_FUZZ_SECONDS:-30}"
echo "sanitizer stage took $(( $(date +%s) - t1 )) s"
echo "total $(( $(date +%s) - t0 )) s"
