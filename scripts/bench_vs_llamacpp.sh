#!/usr/bin/env bash
# Braid against llama.cpp on the bundled model, in one sitting, on this CPU:
# ROUNDS interleaved rounds of `braid bench` (pp512 and tg128, int8 and split
# 16-bit activations, with the cache-aware decode roofline of the same run)
# and of llama.cpp through llama-cpp-python (scripts/llamacpp_bench.py: its
# own API, the same prompt and lengths, the same threads). Prints per-round
# figures, then the medians, tg128 / roofline and Braid / llama.cpp.
# BUSY busy loops (`yes >/dev/null`) run beside both for the whole sitting,
# to compare them on a machine shared with other work. THREADS 0 gives each
# its default: Braid's (-t 0, docs/kernels.md) and llama.cpp's (nproc).
#   scripts/bench_vs_llamacpp.sh [ROUNDS (default 5)] [THREADS (default 2)] [BUSY (default 0)]
# llama-cpp-python is installed on first use into ~/.cache/braid/venv-llama;
# pip builds llama.cpp from source there (GGML_NATIVE, ~15 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${1:-5}
threads=${2:-2}
busy=${3:-0}
llama_threads=$threads
[ "$threads" = 0 ] && llama_threads=$(nproc)
braid=build/frontend/braid
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -x "$braid" ] || scripts/build.sh
venv=${BRAID_LLAMA_VENV:-$HOME/.cache/braid/venv-llama}
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/pip" install --no-binary llama-cpp-python llama-cpp-python
fi
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "cpu: $cpu, $(nproc) CPUs; commit $(git rev-parse --short HEAD); $threads threads; $rounds rounds; $busy busy loops beside"
out=$(mktemp -d)
pids=()
trap 'if [ ${#pids[@]} -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi; rm -rf "$out"' EXIT
for ((i = 0; i < busy; i++)); do
  yes >/dev/null &
  pids+=($!)
done
for r in $(seq "$rounds"); do
  "$braid" bench -p 512 -n 128 -r 3 -t "$threads" --precision int8 --json "$out/int8_$r.json" >/dev/null
  "$braid" bench -p 512 -n 128 -r 3 -t "$threads" --json "$out/split16_$r.json" >/dev/null
  "$venv/bin/python" scripts/llamacpp_bench.py "$model" -p 512 -n 128 -r 3 -t "$llama_threads" \
    --json "$out/llama_$r.json" >/dev/null
  echo "round $r done"
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(kind, r):
    with open(f"{out}/{kind}_{r}.json") as f:
        return json.load(f)
fig = {}
for r in range(1, rounds + 1):
    row = {}
    for kind in ("int8", "split16", "llama"):
        j = load(kind, r)
        for res in j["results"]:
            row[f"{kind} {res['test']}"] = res["avg_ts"]
        if kind != "llama":
            row[f"{kind} roofline"] = j["decode_roofline_tok_s"]
            row[f"{kind} tg128/roofline"] = 100 * row[f"{kind} tg128"] / j["decode_roofline_tok_s"]
    if r == 1:
        j = load("int8", 1)
        print(f"weight stream: {j['weight_stream']}; llama.cpp {load('llama', 1)['system_info'].strip()}")
        print("round | " + " | ".join(row))
    print(f"{r} | " + " | ".join(f"{v:.1f}" for v in row.values()))
    for k, v in row.items():
        fig.setdefault(k, []).append(v)
med = {k: statistics.median(v) for k, v in fig.items()}
print("median | " + " | ".join(f"{v:.1f}" for v in med.values()))
for p in ("int8", "split16"):
    print(f"{p}: tg128 / roofline {med[p + ' tg128/roofline']:.1f}% (median of rounds); "
          f"vs llama.cpp: pp512 {med[p + ' pp512'] / med['llama pp512']:.2f}x, "
          f"tg128 {med[p + ' tg128'] / med['llama tg128']:.2f}x")
PY
