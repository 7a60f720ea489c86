#!/usr/bin/env bash
# Runs the CPU benchmarks on the bundled model and writes raw results to
# bench/results/ (JSON). Run on an otherwise idle machine:
#   scripts/bench_cpu.sh [THREADS]
# Then: python3 scripts/plot_serving.py  (needs matplotlib) for the plot.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
out=bench/results
mkdir -p "$out"
braid=build/frontend/braid
[ -x "$braid" ] || scripts/build.sh
commit=$(git rev-parse --short HEAD)
echo "commit $commit, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== braid bench (pp512, tg128, $threads threads): split 16-bit, then int8 activations"
"$braid" bench -p 512 -n 128 -r 5 -t "$threads" --json "$out/bench_t${threads}.json"
"$braid" bench -p 512 -n 128 -r 5 -t "$threads" --precision int8 --json "$out/bench_t${threads}_int8.json"
echo "== braid bench (1 thread)"
"$braid" bench -p 512 -n 128 -r 3 -t 1 --json "$out/bench_t1.json"

for p in split16 int8; do
  echo "== serving ($p): 256-token prompts, 128-token outputs"
  "$braid" bench --serve -c 1,4,16,64 -r 3 --prompt-len 256 --gen-len 128 -t "$threads" --precision "$p" \
    --json "$out/serve_${p}_t${threads}.json"
  echo "== serving ($p): the same with a 512-token shared prefix"
  "$braid" bench --serve -c 1,4,16 -r 3 --prompt-len 256 --gen-len 128 --shared-prefix 512 \
    -t "$threads" --precision "$p" --json "$out/serve_shared_${p}_t${threads}.json"
  echo "== latency class beside throughput work ($p)"
  "$braid" bench --serve --latency-mix 8 --prompt-len 256 --gen-len 64 -t "$threads" --precision "$p"
done
