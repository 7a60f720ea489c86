#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/tests/fuzz for SECONDS each, seeded from
# tests/fuzz/corpus/<target>/; a failing target does not stop the others, and
# the exit status is 1 if any failed. Usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-asan}
secs=${2:-30}
shopt -s nullglob
targets=("$build"/tests/fuzz/fuzz_*)
if [ ${#targets[@]} -eq 0 ]; then echo "no fuzz targets built"; exit 0; fi
failed=()
for t in "${targets[@]}"; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  seeds="$root/tests/fuzz/corpus/$name"
  work=$(mktemp -d)
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/
  echo "-- $name (${secs}s)"
  status=0
  "$t" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
       -print_final_stats=1 "$work" >"$work.log" 2>&1 || status=$?
  grep -E "stat::number_of_executed_units|ERROR|SUMMARY" "$work.log" || true
  [ "$status" != 0 ] && tail -n 40 "$work.log"
  rm -f "$work.log"
  rm -rf "$work"
  if [ "$status" != 0 ]; then
    echo "fuzz target $name failed"
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed fuzz targets: ${failed[*]}"
  exit 1
fi
