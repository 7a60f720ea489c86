#!/usr/bin/env bash
# Each example app in DAG mode against the same program in the two baseline
# modes of `braid run`:
#   baseline        one blocking FCFS request per call, one at a time, in
#                   program order (a client calling an endpoint per node);
#   baseline-async  one FCFS request per call, sent as soon as its inputs are
#                   ready; the engine tuned for latency (max 4 running
#                   sequences) and for throughput (64), the faster one kept.
# With an added client round trip of 0 and 200 ms per call. map_reduce runs on
# bench/inputs/annual_report.txt (17 chunks). Each time is the median of REPS
# runs (default 3; BRAID_BENCH_REPS), the modes taking turns; BRAID_BENCH_RTTS
# (default "0 200") picks the round trips. tree_summary
# (bench/inputs/tree_report.txt, ~200 KB, made by scripts/make_tree_input.py)
# takes minutes per run, so it is left out of the default list, runs at rtt 0
# only and BRAID_BENCH_TREE_REPS times (default 1); scripts/bench_tree.sh
# measures it with the KV pool sizes. Prints the CPU model; writes
# bench/results/apps_t<THREADS>.json (or BRAID_BENCH_OUT). BRAID_RUN_ARGS adds
# options to every `braid run` (e.g. "--device cuda -m DIR" for the GPU);
# BRAID_BENCH_TIME=program times the program alone (braid run's elapsed_ms)
# instead of the whole process (the default).
#   [BRAID=BINARY] scripts/bench_apps.sh [THREADS] [APPS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
shift || true
apps=("$@")
[ ${#apps[@]} -eq 0 ] && apps=(map_reduce chain multi_agent voting react doc_chat debate extract_verify)
braid=${BRAID:-build/frontend/braid}  # BRAID=PATH: another binary
out=${BRAID_BENCH_OUT:-bench/results/apps_t${threads}.json}
read -r -a run_args <<<"${BRAID_RUN_ARGS:-}"
mkdir -p "$(dirname "$out")"
args_for() {
  case "$1" in
    map_reduce) echo "bench/inputs/annual_report.txt" ;;
    tree_summary) echo "bench/inputs/tree_report.txt" ;;
    *) echo "" ;;
  esac
}
rtts_for() {  # the added round trips an app runs at
  case "$1" in
    tree_summary) echo "0" ;;
    *) echo "${BRAID_BENCH_RTTS:-0 200}" ;;
  esac
}
reps_for() {
  case "$1" in
    tree_summary) echo "${BRAID_BENCH_TREE_REPS:-1}" ;;
    *) echo "${BRAID_BENCH_REPS:-3}" ;;
  esac
}
run_once() {  # run_once APP MODE RTT MAX_RUNNING -> prints seconds
  local t0 t1
  if [ "${BRAID_BENCH_TIME:-process}" = program ]; then
    # The program's own time (braid run --json elapsed_ms): without the
    # process start and model load, which on a GPU take seconds.
    # shellcheck disable=SC2046
    "$braid" run -t "$threads" --db none -q --json --mode "$2" --rtt-ms "$3" --max-running "$4" \
      ${run_args[@]+"${run_args[@]}"} "apps/$1/app.lua" $(args_for "$1") |
      sed -n 's/.*"elapsed_ms": *\([0-9.]*\).*/\1/p' | head -1 | awk '{ print $1 / 1000 }'
    return
  fi
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  "$braid" run -t "$threads" --db none -q --mode "$2" --rtt-ms "$3" --max-running "$4" \
    ${run_args[@]+"${run_args[@]}"} "apps/$1/app.lua" $(args_for "$1") >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; threads $threads" >&2
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
echo "[" >"$out"
first=1
printf "| app | rtt ms | dag s | baseline s | async baseline s (latency / throughput tuned) | dag vs baseline | dag vs best async |\n"
printf "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
for app in "${apps[@]}"; do
  reps=$(reps_for "$app")
  for rtt in $(rtts_for "$app"); do
    # The modes take turns, rep after rep, so that a slow spell of this shared
    # host falls on all of them alike; each figure is the median.
    d=() q=() l=() h=()
    for ((i = 0; i < reps; i++)); do
      d+=("$(run_once "$app" dag "$rtt" 64)")
      q+=("$(run_once "$app" baseline "$rtt" 64)")
      l+=("$(run_once "$app" baseline-async "$rtt" 4)")
      h+=("$(run_once "$app" baseline-async "$rtt" 64)")
    done
    dag=$(median "${d[@]}")
    seq=$(median "${q[@]}")
    lat=$(median "${l[@]}")
    thr=$(median "${h[@]}")
    best=$(awk -v a="$lat" -v b="$thr" 'BEGIN { print (a < b ? a : b) }')
    r_seq=$(awk -v a="$seq" -v b="$dag" 'BEGIN { print a / b }')
    r_async=$(awk -v a="$best" -v b="$dag" 'BEGIN { print a / b }')
    printf "| %s | %d | %.2f | %.2f | %.2f / %.2f | %.2fx | %.2fx |\n" \
      "$app" "$rtt" "$dag" "$seq" "$lat" "$thr" "$r_seq" "$r_async"
    [ $first = 1 ] || echo "," >>"$out"
    first=0
    printf '  {"app": "%s", "rtt_ms": %d, "dag_s": %.3f, "baseline_s": %.3f, "async_latency_s": %.3f, "async_throughput_s": %.3f, "speedup_vs_baseline": %.3f, "speedup_vs_async": %.3f}' \
      "$app" "$rtt" "$dag" "$seq" "$lat" "$thr" "$r_seq" "$r_async" >>"$out"
  done
done
echo "" >>"$out"
echo "]" >>"$out"
echo "wrote $out"
