#!/usr/bin/env bash
# The 200 KB tree map-reduce (apps/tree_summary on bench/inputs/tree_report.txt):
# DAG mode with the KV pool sized from memory (the default), the async
# baseline with the same pool, and DAG mode with the former fixed default of
# 16384 tokens. The app's second pass re-reads every chunk behind the same
# prefix, so the figure to watch besides the time is how many prompt tokens
# came from the cache. Prints one row per run and the CPU model.
#   scripts/bench_tree.sh [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
braid=${BRAID:-build/frontend/braid}
input=bench/inputs/tree_report.txt
[ -f "$input" ] || python3 scripts/make_tree_input.py "$input"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; threads $threads"
printf "| run | seconds | prompt tokens | cached | computed | generated | KV pool |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
one() {  # one LABEL ARGS...
  local label=$1
  shift
  local tmp
  tmp=$(mktemp)
  "$braid" run -t "$threads" --db none --json "$@" apps/tree_summary/app.lua "$input" >"$tmp" 2>"$tmp.err"
  local pool
  pool=$(grep -o 'KV cache [0-9]* tokens per engine' "$tmp.err" | head -n 1 | cut -d' ' -f3)
  python3 - "$tmp" "$label" "$pool" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = r["nodes"]
p = sum(x["prompt_tokens"] for x in n)
c = sum(x["cached_tokens"] for x in n)
g = sum(x["generated_tokens"] for x in n)
print(f"| {sys.argv[2]} | {r['elapsed_ms'] / 1000:.1f} | {p} | {c} | {p - c} | {g} | {sys.argv[3]} tokens |")
PY
  rm -f "$tmp" "$tmp.err"
}
one "dag, pool from memory" --mode dag
one "baseline-async, pool from memory" --mode baseline-async
one "dag, --kv-tokens 16384" --mode dag --kv-tokens 16384
