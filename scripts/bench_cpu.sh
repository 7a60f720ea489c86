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
# The processor beside the results (braid bench also prints its caches).
cpu=$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1 || true)
[ -n "$cpu" ] || cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n1)
[ -n "$cpu" ] || cpu="unknown CPU"
echo "commit $commit, $cpu, $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$cpu, $(nproc) cores (commit $commit, $(date -u +%Y-%m-%d))" >"$out/cpu.txt"

echo "== braid bench (pp512, tg128, $threads threads): split 16-bit, then int8 activations"
"$braid" bench -p 512 -n 128 -r 5 -t "$threads" --json "$out/bench_t${threads}.json"
"$braid" bench -p 512 -n 128 -r 5 -t "$threads" --precision int8 --json "$out/bench_t${threads}_int8.json"
echo "== braid bench (1 thread)"
"$braid" bench -p 512 -n 128 -r 3 -t 1 --json "$out/bench_t1.json"

# Serving configurations: activations (split 16-bit or int8) and KV cache
# element type (fp16, or q8 read by integer dot products).
for cfg in "split16 f16" "int8 f16" "int8 q8"; do
  read -r p kv <<<"$cfg"
  name="${p}_${kv}"
  echo "== serving ($p, $kv KV): 256-token prompts, 128-token outputs"
  "$braid" bench --serve -c 1,4,16,64 -r 3 --prompt-len 256 --gen-len 128 -t "$threads" --precision "$p" \
    --kv "$kv" --json "$out/serve_${name}_t${threads}.json"
  echo "== serving ($p, $kv KV): the same with a 512-token shared prefix"
  "$braid" bench --serve -c 1,4,16 -r 3 --prompt-len 256 --gen-len 128 --shared-prefix 512 \
    -t "$threads" --precision "$p" --kv "$kv" --json "$out/serve_shared_${name}_t${threads}.json"
  echo "== latency class beside throughput work ($p, $kv KV)"
  "$braid" bench --serve --latency-mix 8 -r 3 --prompt-len 256 --gen-len 64 -t "$threads" --precision "$p" \
    --kv "$kv"
done
# The batching goal (16 concurrent >= 6x single), levels 1 and 16 taking turns.
echo "== batching goal (int8, q8 KV): 1 and 16 concurrent, 5 repetitions"
"$braid" bench --serve -c 1,16 -r 5 --prompt-len 256 --gen-len 128 -t "$threads" --precision int8 --kv q8
