#!/usr/bin/env bash
# Agent serving on the GPU machine (scripts/bench_agents.py over braid serve
# on the llama8b shape, random weights), from the repository root with the
# binary packed by scripts/gpu/pack_braid.sh (carry build-gpu):
#   OUT=DIR scripts/gpu/agents.sh [bench_agents.py options]
# Makes the checkpoint (with its tokenizer) when the machine has none (it
# stays while the machine is warm), and writes
# OUT/agents.{txt,json}. Options go to bench_agents.py (policies, loads,
# programs, ...); a call must end within 600 s, so split the policies and
# loads over several calls and merge the JSON files afterwards.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT_ROOT=${OUT:?set OUT}
M=/tmp/braid-gpu/models/llama8b
if [ ! -f "$M/config.json" ]; then
  OUT=/tmp DEADLINE_S=240 scripts/gpu/run_all.sh --stages make --shapes llama8b > "$OUT_ROOT/make.log" 2>&1
  tail -3 "$OUT_ROOT/make.log"
fi
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
python3 scripts/bench_agents.py --braid build-gpu/frontend/braid --model "$M" --device cuda \
  --shape gpu --json "$OUT_ROOT/agents.json" "$@" 2>&1 | tee "$OUT_ROOT/agents.txt"
