#!/usr/bin/env bash
# Fair sharing on the bundled model (docs/fairness.md), two workloads:
#
# 1. Overload: two clients sending at 15 and 30 requests/s (1:2), each alone
#    above what the engine serves, equal prompt (64) and output (32) lengths,
#    300 requests; fcfs, vtc and vtc with a locality bound, interleaved
#    ROUNDS times. Per policy: output tok/s (median), the largest and mean
#    difference in service between the clients per window, and the ratio of
#    each to fcfs's.
# 2. Shared prefixes: 16 clients, each with its own 512-token system prompt
#    (+ 32 tokens of its own per request, 32 generated), all backlogged, in
#    a KV pool of 4,096 tokens that holds a few of the prefixes at once;
#    fcfs, vtc and vtc with the locality bound, with cached prompt tokens
#    free (w_c = 0) and priced as computed (w_c = 1, VTC as published).
#
# Raw JSON per run in OUT (default bench/results/fairness), then
# scripts/plot_fairness.py draws docs/img/fairness_*.png. Run on an
# otherwise idle machine:
#   scripts/bench_fairness.sh [ROUNDS] [THREADS] [OUT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${1:-3}
threads=${2:-2}
out=${3:-bench/results/fairness}
braid=${BRAID:-build/frontend/braid}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"

overload() {  # TAG ARGS...
  local tag=$1
  shift
  "$braid" bench --serve -m "$model" -t "$threads" --rate 45 --requests 300 --prompt-len 64 \
    --gen-len 32 --clients 1,2 --max-running 8 "$@" --json "$out/$tag.json" | tail -3
}
for r in $(seq 1 "$rounds"); do
  echo "== overload, round $r"
  overload "overload_fcfs_r$r" --policy fcfs
  overload "overload_vtc_r$r" --policy vtc
  overload "overload_vtc_local_r$r" --policy vtc --locality-bound 2000
done

clients=$(printf '1%.0s,' $(seq 1 16))
shared() {  # TAG ARGS...
  local tag=$1
  shift
  "$braid" bench --serve -m "$model" -t "$threads" --rate 100 --requests 96 --shared-prefix 512 \
    --prompt-len 32 --gen-len 32 --clients "${clients%,}" --max-running 4 --kv-tokens 4096 "$@" \
    --json "$out/$tag.json" | tail -3 | cut -c1-400
}
echo "== shared prefixes"
shared prefix_fcfs --policy fcfs
for wc in 0 1; do
  shared "prefix_vtc_wc$wc" --policy vtc --cached-weight "$wc"
  shared "prefix_vtc_local_wc$wc" --policy vtc --cached-weight "$wc" --locality-bound 4000
done
python3 scripts/plot_fairness.py "$out"
