#!/usr/bin/env bash
# FP8 weights on the GPU machine, from the repository root with the binaries
# packed by scripts/gpu/pack_braid.sh (carry build-gpu):
#   OUT=DIR [SHAPES=llama8b,llama1b] [COMPARE=1] [SERVE=1] scripts/gpu/fp8_check.sh
# (COMPARE=0 skips transformers' reference and the comparison with it.)
# 1. the CUDA kernels against fp32 loops (kernels_ops_cuda_tests: e4m3 rows,
#    the FP8 matrix-vector kernel);
# 2. llama8b and llama1b (random weights, made and referenced by run_all.sh
#    when missing): braid_gpu_check run --weights fp8 against transformers
#    bf16 (compare.py: logits cosine, top-1 agreement, greedy), and batch
#    --weights fp8 (32 ragged requests batched = alone);
# 3. batch-1 decode, bf16 and fp8 alternating, and a decode sweep of each;
# 4. braid bench --serve --rate inf, bf16 then fp8 (200 x 1024/1024).
# Everything lands in OUT (few files: the tool returns a limited number).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT_ROOT=${OUT:?set OUT}
BIN=build-gpu/engine/braid_gpu_check
CACHE=/tmp/braid-gpu
M=$CACHE/models
START=$(date +%s)
left() { echo $(( ${DEADLINE_S:-570} - ($(date +%s) - START) )); }
LOG=$OUT_ROOT/fp8.log
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep 'Model name' | sed 's/  */ /g'
} | tee "$LOG"

echo "=== kernels" | tee -a "$LOG"
timeout 120 build-gpu/kernels/kernels_ops_cuda_tests > "$OUT_ROOT/kernels.txt" 2>&1
echo "rc $?" | tee -a "$LOG"; grep -E "^FAIL|fp8|passed|FAILED" "$OUT_ROOT/kernels.txt" | tee -a "$LOG"

echo "=== models and references" | tee -a "$LOG"
SHAPES=${SHAPES:-llama8b,llama1b}
STAGES=make,ref; [ "${COMPARE:-1}" = 1 ] || STAGES=make
OUT=$OUT_ROOT/run_all DEADLINE_S=200 scripts/gpu/run_all.sh --stages $STAGES --shapes "$SHAPES" \
  > "$OUT_ROOT/run_all.out" 2>&1
tail -4 "$OUT_ROOT/run_all.out" | tee -a "$LOG"

for shape in ${SHAPES//,/ }; do
  echo "=== $shape: fp8 against transformers bf16" | tee -a "$LOG"
  D=$CACHE/braid/$shape-fp8
  rm -rf "$D"; mkdir -p "$D"
  if [ "${COMPARE:-1}" = 1 ]; then
    timeout 120 $BIN run --weights fp8 --model $M/$shape --device cuda --prompts $CACHE/ref/$shape/prompts.json \
      --out-dir "$D" >> "$LOG" 2>&1
    python3 scripts/gpu/compare.py --ref $CACHE/ref/$shape --braid "$D" --out "$OUT_ROOT/$shape-fp8.compare.json" \
      2>&1 | tee -a "$LOG"
  fi
  echo "--- batch (fp8)" | tee -a "$LOG"
  [ -f $CACHE/ref/$shape/batch_prompts.json ] || python3 - $CACHE/ref/$shape $M/$shape <<'PY'
# The batch check's 32 prompts as hf_reference.py makes them, without its reference.
import json, os, sys
sys.path.insert(0, "scripts/gpu")
import hf_reference as hr
out, model = sys.argv[1:]
os.makedirs(out, exist_ok=True)
vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
json.dump({"prompts": hr.batch_prompts(vocab)}, open(os.path.join(out, "batch_prompts.json"), "w"))
PY
  timeout 120 $BIN batch --weights fp8 --model $M/$shape --prompts $CACHE/ref/$shape/batch_prompts.json --gen 32 \
    2>/dev/null | tail -c 300 | tee -a "$LOG"
done

echo "=== decode, bf16 and fp8 alternating" | tee -a "$LOG"
decode() {  # SHAPE WEIGHTS
  timeout 90 $BIN decode --weights "$2" --model "$M/$1" --prompt 128 --gen 128 2>/dev/null |
    python3 -c '
import json, sys
j = json.loads(sys.stdin.read().strip().splitlines()[-1])
print("%.1f tok/s, roofline share %.3f, bytes/token %d" % (j["tokens_per_s"], j["roofline_share"], j["bytes_per_token"]))'
}
for round in 1 2; do
  for shape in ${SHAPES//,/ }; do
    for w in bf16 fp8; do
      [ "$(left)" -gt 200 ] || break 3
      echo "$shape $w: $(decode $shape $w)" | tee -a "$LOG"
    done
  done
done
for w in bf16 fp8; do
  [ "$(left)" -gt 160 ] || break
  echo "--- llama8b sweep ($w)" | tee -a "$LOG"
  timeout 90 $BIN sweep --weights $w --model $M/llama8b --batches 1,4,8,32,128 --prompt 512 --gen 64 2>&1 |
    grep '^batch' | tee -a "$LOG"
done

[ "${SERVE:-1}" = 1 ] || { echo "done in $(( $(date +%s) - START )) s" | tee -a "$LOG"; exit 0; }
echo "=== offline serving (braid bench --serve --rate inf, llama8b)" | tee -a "$LOG"
for size in "200 1024 1024"; do
  set -- $size
  for w in bf16 fp8; do
    [ "$(left)" -gt 100 ] || break 2
    echo "--- $1 requests, $2 in / $3 out, $w" | tee -a "$LOG"
    timeout $(( $(left) - 20 )) build-gpu/frontend/braid bench --serve --device cuda -m $M/llama8b --weights $w \
      --rate inf --requests $1 --prompt-len $2 --gen-len $3 --json "$OUT_ROOT/serve_${1}_$w.json" \
      > "$OUT_ROOT/serve_${1}_$w.txt" 2>&1
    echo "rc $?" | tee -a "$LOG"; grep -iE "output tok/s|tok/s|error" "$OUT_ROOT/serve_${1}_$w.txt" | head -4 | tee -a "$LOG"
  done
done
rm -f $OUT_ROOT/serve_*.json
echo "done in $(( $(date +%s) - START )) s" | tee -a "$LOG"
