#!/usr/bin/env bash
# Each example app in DAG mode against the same app in baseline mode (one
# independent FCFS request per call, as a LangChain-style client drives an
# OpenAI endpoint), with the baseline engine tuned for latency (max 4 running
# sequences) and for throughput (64), and with an added client round trip of
# 0 and 200 ms per call. Writes bench/results/apps_t<THREADS>.json.
#   scripts/bench_apps.sh [THREADS] [APPS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
shift || true
apps=("$@")
[ ${#apps[@]} -eq 0 ] && apps=(map_reduce chain multi_agent voting react doc_chat)
braid=build/frontend/braid
out=bench/results/apps_t${threads}.json
mkdir -p bench/results
echo "[" >"$out"
first=1
run() {  # run APP MODE RTT MAX_RUNNING -> prints seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$braid" run -t "$threads" --db none -q --mode "$2" --rtt-ms "$3" --max-running "$4" \
    "apps/$1/app.lua" >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
printf "| app | rtt ms | dag s | baseline (latency-tuned) s | baseline (throughput-tuned) s | speedup vs best baseline |\n"
printf "| --- | ---: | ---: | ---: | ---: | ---: |\n"
for app in "${apps[@]}"; do
  for rtt in 0 200; do
    dag=$(run "$app" dag "$rtt" 64)
    lat=$(run "$app" baseline "$rtt" 4)
    thr=$(run "$app" baseline "$rtt" 64)
    best=$(echo "if ($lat < $thr) $lat else $thr" | bc -l)
    ratio=$(echo "$best / $dag" | bc -l)
    printf "| %s | %d | %.2f | %.2f | %.2f | %.2fx |\n" "$app" "$rtt" "$dag" "$lat" "$thr" "$ratio"
    [ $first = 1 ] || echo "," >>"$out"
    first=0
    printf '  {"app": "%s", "rtt_ms": %d, "dag_s": %.3f, "baseline_latency_s": %.3f, "baseline_throughput_s": %.3f, "speedup": %.3f}' \
      "$app" "$rtt" "$dag" "$lat" "$thr" "$ratio" >>"$out"
  done
done
echo "" >>"$out"
echo "]" >>"$out"
echo "wrote $out"
