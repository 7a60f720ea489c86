#!/usr/bin/env bash
# The model families on the GPU machine, from the repository root with the
# binaries packed by scripts/gpu/pack_braid.sh (carry build-gpu):
#   OUT=DIR [BASE=build-gpu/base/braid_gpu_check] scripts/gpu/families_check.sh
# 1. the CUDA kernels against fp32 loops (kernels_ops_cuda_tests);
# 2. the CUDA backend against the CPU backend's exact path on every tiny
#    fixture (braid_gpu_check compare-cpu; tests/fixtures/models/);
# 3. run_all.sh make,ref,braid,compare for the qwen3 and gemma3 shapes
#    (random weights, transformers bf16 on the same GPU) and llama1b,
#    llama8b (that nothing of the Llama block moved);
# 4. Gemma 3's sliding layers in slides: braid_gpu_check slides-equal (greedy
#    outputs with slides, preempting and taking slides back, equal to those
#    without; the default pool's positions both ways) and offline serving
#    with slides on and off (braid bench --serve);
# 5. with BASE (a braid_gpu_check built from an earlier commit): batch-1
#    decode of llama1b and llama8b and a batch sweep of llama8b, the base
#    and this build alternating, so that the two are timed on one card.
# STAGES (default kernels,cpu,families,slides,bench) picks the steps (1-5);
# SHAPES (default qwen3,gemma3,llama1b,llama8b) step 3's shapes; step 4
# makes the gemma3 checkpoint when step 3 did not. Everything lands in OUT: kernels.txt,
# cpu_<fixture>.json, run_all's results.json and log, slides.json,
# slides_bench.txt, bench.txt.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT_ROOT=${OUT:?set OUT}
BIN=build-gpu/engine/braid_gpu_check
BASE=${BASE:-}
START=$(date +%s)
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep 'Model name' | sed 's/  */ /g'
} | tee "$OUT_ROOT/machine.txt"

STAGES=,${STAGES:-kernels,cpu,families,slides,bench},
stage() { [[ $STAGES == *,$1,* ]]; }

if stage kernels; then
echo "=== kernels"
timeout 120 build-gpu/kernels/kernels_ops_cuda_tests > "$OUT_ROOT/kernels.txt" 2>&1
echo "rc $?"; grep -E "^FAIL|passed|FAILED" "$OUT_ROOT/kernels.txt"
fi

if stage cpu; then
echo "=== CUDA against the CPU on the tiny fixtures"
for m in llama_tiny llama3_tiny_sharded mistral_tiny_fp16 qwen2_tiny_bf16 qwen3_tiny gemma3_tiny \
         mistral_sliding_tiny; do
  timeout 60 $BIN compare-cpu --model tests/fixtures/models/$m > "$OUT_ROOT/cpu_$m.json" 2> "$OUT_ROOT/cpu_$m.log"
  rc=$?
  python3 - "$m" "$rc" "$OUT_ROOT/cpu_$m.json" <<'PY'
import json, sys
m, rc, path = sys.argv[1:]
try:
    j = json.loads(open(path).read().strip().splitlines()[-1])
    print(f"{m:22s} rc {rc} pass {j['pass']} min cos {j['min_cosine']:.6f} "
          f"max |diff| {j['max_abs_diff']:.4f} greedy {j['greedy_identical']}/{j['prompts']} "
          f"exceptions {j['exceptions']}")
except Exception as e:
    print(f"{m:22s} rc {rc}: no result ({e})")
PY
  [ "$rc" = 0 ] || tail -3 "$OUT_ROOT/cpu_$m.log"
done

fi

if stage families; then
echo "=== families against transformers"
OUT=$OUT_ROOT DEADLINE_S=$((380 - ($(date +%s) - START))) scripts/gpu/run_all.sh \
  --stages make,ref,braid,compare --shapes "${SHAPES:-qwen3,gemma3,llama1b,llama8b}" \
  > "$OUT_ROOT/run_all.out" 2>&1
tail -12 "$OUT_ROOT/run_all.out"
fi

M=/tmp/braid-gpu/models
if stage slides; then
  echo "=== Gemma 3's sliding layers in slides"
  [ -d "$M/gemma3" ] || OUT=$OUT_ROOT scripts/gpu/run_all.sh --stages make --shapes gemma3 \
    > "$OUT_ROOT/make_gemma3.log" 2>&1
  timeout 240 $BIN slides-equal --model "$M/gemma3" > "$OUT_ROOT/slides.json" 2> "$OUT_ROOT/slides.log"
  echo "rc $?"; tail -1 "$OUT_ROOT/slides.json"; tail -3 "$OUT_ROOT/slides.log"
  : > "$OUT_ROOT/slides_bench.txt"
  for slides in on off; do
    [ $(( $(date +%s) - START )) -lt 480 ] || break
    echo "--- --kv-slides $slides" >> "$OUT_ROOT/slides_bench.txt"
    timeout 100 build-gpu/frontend/braid bench --serve -m "$M/gemma3" --device cuda --rate inf \
      --requests 128 --prompt-len 2048 --gen-len 256 --kv-slides $slides \
      >> "$OUT_ROOT/slides_bench.txt" 2>&1
  done
  cat "$OUT_ROOT/slides_bench.txt"
fi

[ -n "$BASE" ] && stage bench || exit 0
echo "=== decode: base and this build, alternating"
: > "$OUT_ROOT/bench.txt"
decode() {  # LABEL BIN SHAPE
  local tps
  tps=$(timeout 60 "$2" decode --model "$M/$3" --prompt 128 --gen 128 2>/dev/null |
        python3 -c 'import json,sys; print(round(json.loads(sys.stdin.read().strip().splitlines()[-1])["tokens_per_s"], 1))' 2>/dev/null)
  echo "$3 $1 decode ${tps:-failed} tok/s" | tee -a "$OUT_ROOT/bench.txt"
}
for round in 1 2; do
  for shape in llama1b llama8b; do
    [ $(( $(date +%s) - START )) -lt 540 ] || break 2
    decode base "$BASE" $shape
    decode new "$BIN" $shape
  done
done
for which in base new; do
  [ $(( $(date +%s) - START )) -lt 520 ] || break
  b=$BIN; [ $which = base ] && b=$BASE
  echo "--- llama8b sweep ($which)" | tee -a "$OUT_ROOT/bench.txt"
  timeout 80 "$b" sweep --model "$M/llama8b" --batches 1,32,128 --prompt 512 --gen 64 2>&1 |
    grep '^batch' | tee -a "$OUT_ROOT/bench.txt"
done
