#!/usr/bin/env bash
# The host KV tier on the GPU machine, from the repository root with the
# binary packed by scripts/gpu/pack_braid.sh (carry build-gpu):
#   OUT=DIR [STEPS=copy,equal,bench] scripts/gpu/kv_tier.sh [PREFIX_TOKENS] [REQUESTS]
# 1. braid_gpu_check copy: block copies each way against the link's own
#    bandwidth, measured in the same run, a byte-exact round trip and the
#    ordering of copies against forward passes (OUT/copy.json).
# 2. braid_gpu_check tier-equal: greedy outputs with the tier off and on
#    (64 requests over 8 prefixes, pool forced small; OUT/equal.json).
# 3. braid bench --serve --rate over four clients, each with its own
#    PREFIX_TOKENS-token system prompt (default 32768), on a KV pool that
#    holds about one and a half of them: the tier off, then on
#    (OUT/tier_{off,on}.{txt,json}); each row says the TTFT of requests
#    whose prompt came from the device, the host tier or was computed.
# The llama8b shape (random weights) is made when the machine has none; its
# context is raised to fit the prompts (a config copy beside the weights).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT_ROOT=${OUT:?set OUT}
PREFIX=${1:-32768}
REQUESTS=${2:-12}
M=/tmp/braid-gpu/models/llama8b
if [ ! -f "$M/config.json" ]; then
  OUT=/tmp DEADLINE_S=240 scripts/gpu/run_all.sh --stages make --shapes llama8b > "$OUT_ROOT/make.log" 2>&1
  tail -3 "$OUT_ROOT/make.log"
fi
L=/tmp/braid-gpu/models/llama8b-long
mkdir -p "$L"
for f in "$M"/*.safetensors "$M"/*.safetensors.index.json; do [ -e "$f" ] && ln -sf "$f" "$L/"; done
cp "$M"/tokenizer*.json "$L/"
python3 - "$M/config.json" "$L/config.json" "$PREFIX" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = max(c.get("max_position_embeddings", 0), int(sys.argv[3]) + 4096)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep 'Model name' | sed 's/  */ /g'
  free -g | sed -n 2p
} | tee "$OUT_ROOT/machine.txt"
STEPS=${STEPS:-copy,equal,bench}
if [[ ,$STEPS, == *,copy,* ]]; then
echo "=== copy"
timeout 240 build-gpu/engine/braid_gpu_check copy --model "$M" > "$OUT_ROOT/copy.json" 2> "$OUT_ROOT/copy.log"
echo "rc $?"; tail -c 1500 "$OUT_ROOT/copy.json"; tail -5 "$OUT_ROOT/copy.log"
fi
if [[ ,$STEPS, == *,equal,* ]]; then
  echo "=== tier-equal"
  timeout 240 build-gpu/engine/braid_gpu_check tier-equal --model "$M" > "$OUT_ROOT/equal.json" 2> "$OUT_ROOT/equal.log"
  echo "rc $?"; cat "$OUT_ROOT/equal.json"; tail -3 "$OUT_ROOT/equal.log"
fi
[[ ,$STEPS, == *,bench,* ]] || exit 0
POOL=$(( PREFIX * 3 / 2 ))
for host in off 24G; do
  name=tier_$([ "$host" = off ] && echo off || echo on)
  echo "=== $name (--kv-host $host)"
  timeout 280 build-gpu/frontend/braid bench --serve --device cuda -m "$L" --rate 0.2 \
    --requests "$REQUESTS" --clients 1,1,1,1 --shared-prefix "$PREFIX" --prompt-len 32 --gen-len 8 \
    --kv-tokens "$POOL" --kv-host "$host" --json "$OUT_ROOT/$name.json" > "$OUT_ROOT/$name.txt" 2>&1
  echo "rc $?"; tail -8 "$OUT_ROOT/$name.txt"
done
