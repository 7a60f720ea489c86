#!/usr/bin/env bash
# Decode attention on tensor cores, on the GPU machine, from the repository
# root with the binaries packed by scripts/gpu/pack_braid.sh (carry build-gpu):
#   OUT=DIR [STAGES=kernels,cpu,sweep,compare,equal,serve] [BASE=...] scripts/gpu/attention_check.sh
# Stages, in this order:
#   kernels  kernels_ops_cuda_tests: both decode attention kernels (tensor
#            cores, CUDA cores) against fp32 loops; a failure stops the run
#            unless KEEP_GOING=1
#   cpu      braid_gpu_check compare-cpu on every tiny fixture
#   engines  braid_gpu_check engines: two serving engines on every GPU
#   bench    cuda_cascade_bench: one layer's shared-prefix attention (64 x
#            4,096 keys, 8B shape) by kernel, against the same step with
#            no prefix
#   gemv     cuda_gemv_bench: the matrix-vector kernel on the 8B and 1B
#            products of a decode token, for every depth and split of k,
#            bf16 then e4m3
#   layers   cuda_layers_bench: a token's layers in one launch
#            (kc::DecodeLayers) on the 1B and 8B shapes, as it runs and
#            with no waits, each beside the copy rate, with a trace of
#            where a layer's time goes
#   decode   batch-1 decode of each SHAPE:WEIGHTS[:KV] of DECODE_RUNS (default
#            "llama8b:bf16 llama1b:bf16 llama8b:fp8"; KV bf16 or fp8, the
#            KV cache, fp8 for this build only), BASE (a
#            braid_gpu_check built from an earlier commit) and this build
#            alternating, DECODE_ROUNDS (2) rounds, and under each
#            VAR=VALUE of DECODE_ENV (say "BRAID_CUDA_RANGE_KEYS=1
#            BRAID_CUDA_UNFUSE=norm") this build once more; the
#            products the backend timed and chose at load in decode_isa.txt
#   batch    llama8b decode steps of many sequences (BATCH_SIZES, default
#            "64,128,192,256", at BATCH_PROMPT tokens of context, default
#            1,536), BASE and this build alternating, BATCH_ROUNDS (2)
#            rounds, each beside its roofline; this build once per KV
#            cache of BATCH_KV (default "bf16"; say "bf16 fp8"), and once
#            more per KV cache under each VAR=VALUE of BATCH_ENV (say
#            "BRAID_CUDA_EARLY_KEYS=1")
#   sweep    llama8b decode sweeps at 512 and 4,096 tokens of context, the
#            CUDA-core kernel (BRAID_CUDA_ATTN=simt) and the tensor-core one
#            alternating, each beside its roofline
#   fp8      llama8b batch-1 decode, bf16 then fp8: tokens/s and the
#            backend's own timing of each matrix product (ModelInfo::isa)
#   compare  run_all.sh make,ref,braid,compare for llama8b and llama1b
#            (logits cosine, greedy, 32 ragged batched = alone)
#   equal    braid_gpu_check serve-equal on llama1b (64 mixed requests,
#            preemption and cascade)
#   (compare and equal pass BRAID_GPU_FLAGS to braid_gpu_check: say
#   "--kv fp8")
#   cascade  braid_gpu_check cascade on llama8b (64 requests over a
#            4,096-token prefix: cascade on, off, no prefix, and eager)
#            with either decode kernel (the prefix itself always runs on
#            tensor cores, CascadeAttention); CASCADE_ATTN="tc" runs the
#            tensor-core one only
#   serve    braid bench --serve, 200 x 1,024/1,024 on llama8b, for each
#            ATTN:RATE:TOKENS[:STEP_MS[:WEIGHTS[:KV]]] of SERVE_RUNS (default
#            "simt:inf:0 tc:inf:0 tc:16:0": CUDA cores then tensor cores at
#            rate inf, tensor cores at 16 req/s; TOKENS per step, 0 the
#            backend's default; STEP_MS a step-time target, --step-ms;
#            WEIGHTS bf16 (default) or fp8, --weights; KV bf16 (default)
#            or fp8, the KV cache, --kv)
# The models are made by run_all.sh when missing. Few files land in OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT_ROOT=${OUT:?set OUT}
mkdir -p "$OUT_ROOT"
STAGES=${STAGES:-kernels,cpu,engines,bench,gemv,layers,decode,batch,sweep,fp8,compare,equal,cascade,serve}
BIN=build-gpu/engine/braid_gpu_check
CACHE=/tmp/braid-gpu
M=$CACHE/models
START=$(date +%s)
LOG=$OUT_ROOT/attention.log
left() { echo $((${DEADLINE_S:-570} - ($(date +%s) - START))); }
has() { [[ ",$STAGES," == *",$1,"* ]]; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep 'Model name' | sed 's/  */ /g'
} | tee "$LOG"

make_models() {  # SHAPES STAGES
  local missing=0
  for shape in ${1//,/ }; do [ -f "$M/$shape/config.json" ] || missing=1; done
  [ $missing = 0 ] && [[ "$2" == make ]] && return
  OUT=$OUT_ROOT/run_all DEADLINE_S=$(($(left) - 60)) scripts/gpu/run_all.sh --stages "$2" \
    --shapes "$1" >> "$OUT_ROOT/run_all.out" 2>&1
  tail -6 "$OUT_ROOT/run_all.out" | tee -a "$LOG"
}

if has kernels; then
  echo "=== kernels" | tee -a "$LOG"
  timeout 150 build-gpu/kernels/kernels_ops_cuda_tests > "$OUT_ROOT/kernels.txt" 2>&1
  rc=$?
  echo "rc $rc" | tee -a "$LOG"
  grep -E "^FAIL|passed|FAILED" "$OUT_ROOT/kernels.txt" | head -20 | tee -a "$LOG"
  [ $rc = 0 ] || [ "${KEEP_GOING:-0}" = 1 ] || { echo "kernel tests failed: stopping (KEEP_GOING=1 goes on)" | tee -a "$LOG"; exit 1; }
fi

if has cpu; then
  echo "=== CUDA against the CPU on the tiny fixtures" | tee -a "$LOG"
  for m in $(ls tests/fixtures/models); do
    model=tests/fixtures/models/$m
    [ -f $model/config.json ] || model=$(ls $model/*.gguf 2> /dev/null | head -1)
    [ -n "$model" ] || continue
    timeout 60 $BIN compare-cpu --model $model > "$OUT_ROOT/cpu.json.tmp" 2>> "$OUT_ROOT/cpu.log"
    echo "$m rc $? $(tail -1 "$OUT_ROOT/cpu.json.tmp" | head -c 300)" | tee -a "$LOG"
  done
  rm -f "$OUT_ROOT/cpu.json.tmp"
fi

if has engines; then
  echo "=== two engines on every GPU" | tee -a "$LOG"
  timeout 120 $BIN engines --share 2 --model tests/fixtures/models/llama_tiny > "$OUT_ROOT/engines.json" 2>> "$OUT_ROOT/cpu.log"
  echo "engines rc $? $(tail -1 "$OUT_ROOT/engines.json" | head -c 300)" | tee -a "$LOG"
fi

if has bench; then
  echo "=== one layer's shared-prefix attention (cuda_cascade_bench)" | tee -a "$LOG"
  timeout 120 build-gpu/kernels/cuda_cascade_bench --ranges ${BENCH_RANGES:-1,4,9,16} 2>&1 | tee -a "$LOG"
fi

if has gemv; then
  echo "=== the matrix-vector kernel by depth and split (cuda_gemv_bench)" | tee -a "$LOG"
  timeout 120 build-gpu/kernels/cuda_gemv_bench 2>&1 | tee -a "$LOG"
  timeout 60 build-gpu/kernels/cuda_gemv_bench --fp8 2>&1 | tee -a "$LOG"
fi

if has layers; then
  echo "=== a token's layers in one launch (cuda_layers_bench)" | tee -a "$LOG"
  timeout 180 build-gpu/kernels/cuda_layers_bench 2>&1 | tee -a "$LOG"
fi

if has sweep || has batch || has fp8 || has serve || has decode; then make_models llama8b make; fi
DECODE_RUNS=${DECODE_RUNS:-llama8b:bf16 llama1b:bf16 llama8b:fp8}
if has decode && [[ "$DECODE_RUNS" == *llama1b* ]]; then make_models llama1b make; fi

if has decode; then
  echo "=== batch-1 decode, ${BASE:-no base} and this build alternating" | tee -a "$LOG"
  decode() {  # LABEL BIN SHAPE WEIGHTS KV [VAR=VALUE]
    local kv=(); [ "$5" = bf16 ] || kv=(--kv "$5")
    env ${6:-} timeout 90 "$2" decode --weights $4 "${kv[@]}" --model $M/$3 --prompt 128 --gen 128 2> /dev/null |
      python3 -c '
import json, sys
j = json.loads(sys.stdin.read().strip().splitlines()[-1])
print("%.1f tok/s, roofline share %.3f, greedy %s" % (j["tokens_per_s"], j["roofline_share"], j.get("greedy_fnv", "-")))
print(j.get("kernels", ""), file=sys.stderr)' 2>> "$OUT_ROOT/decode_isa.txt" | sed "s/^/$3 $4 kv $5 $1: /" | tee -a "$LOG"
  }
  for round in $(seq ${DECODE_ROUNDS:-2}); do
    for run in $DECODE_RUNS; do
      IFS=: read -r shape w kv <<< "$run"
      kv=${kv:-bf16}
      [ "$(left)" -gt 60 ] || break 2
      [ -n "${BASE:-}" ] && [ $kv = bf16 ] && decode base "$BASE" $shape $w $kv
      decode new $BIN $shape $w $kv
      for e in ${DECODE_ENV:-}; do decode "new $e" $BIN $shape $w $kv "$e"; done
    done
  done
fi

if has batch; then
  echo "=== llama8b steps of many sequences, ${BASE:-no base} and this build alternating" | tee -a "$LOG"
  for round in $(seq ${BATCH_ROUNDS:-2}); do
    runs=(); [ -n "${BASE:-}" ] && runs=("$BASE:bf16:")
    for kv in ${BATCH_KV:-bf16}; do
      runs+=("$BIN:$kv:")
      for e in ${BATCH_ENV:-}; do runs+=("$BIN:$kv:$e"); done
    done
    for r in "${runs[@]}"; do
      IFS=: read -r b kv e <<< "$r"
      [ "$(left)" -gt 90 ] || break 2
      label=new; [ "$b" = "$BIN" ] || label=base
      opt=(); [ $kv = bf16 ] || { opt=(--kv $kv); label=${label}_$kv; }
      [ -z "$e" ] || label=${label}_${e//[^A-Za-z0-9]/_}
      env $e timeout 150 $b sweep --model $M/llama8b "${opt[@]}" --batches ${BATCH_SIZES:-64,128,192,256} \
        --prompt ${BATCH_PROMPT:-1536} --gen 16 > "$OUT_ROOT/batch_${label}_$round.json" 2> "$OUT_ROOT/batch.err"
      grep '^batch' "$OUT_ROOT/batch.err" | sed "s/^/$label: /" | tee -a "$LOG"
    done
  done
  tail -1 "$OUT_ROOT/batch_new_1.json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("kernels",""))' \
    > "$OUT_ROOT/batch_isa.txt" 2>&1
fi

if has sweep; then
  echo "=== llama8b decode sweeps, CUDA cores (simt) and tensor cores (tc) alternating" | tee -a "$LOG"
  for ctx in "512 1,8,32,128,256" "4096 1,8,32,64"; do
    set -- $ctx
    for attn in simt tc; do
      [ "$(left)" -gt 120 ] || break 2
      echo "--- context $1, $attn" | tee -a "$LOG"
      BRAID_CUDA_ATTN=$attn timeout 150 $BIN sweep --model $M/llama8b --batches $2 --prompt $1 --gen 64 \
        > "$OUT_ROOT/sweep_$1_$attn.json" 2> "$OUT_ROOT/sweep.err"
      grep '^batch' "$OUT_ROOT/sweep.err" | tee -a "$LOG"
    done
  done
fi

if has fp8; then
  echo "=== llama8b batch-1 decode, bf16 and fp8, with the timed products" | tee -a "$LOG"
  for w in bf16 fp8; do
    [ "$(left)" -gt 60 ] || break
    timeout 90 $BIN decode --weights $w --model $M/llama8b --prompt 128 --gen 128 2> /dev/null | python3 -c '
import json, sys
j = json.loads(sys.stdin.read().strip().splitlines()[-1])
print("%.1f tok/s, roofline share %.3f; %s" % (j["tokens_per_s"], j["roofline_share"], j.get("kernels", "")))' |
      sed "s/^/$w: /" | tee -a "$LOG"
  done
fi

if has compare; then
  echo "=== llama8b, llama1b against transformers (run_all.sh)" | tee -a "$LOG"
  make_models llama8b,llama1b make,ref,braid,compare
fi

if has equal; then
  echo "=== serve-equal (llama1b)" | tee -a "$LOG"
  make_models llama1b make
  timeout 200 $BIN serve-equal --model $M/llama1b ${BRAID_GPU_FLAGS:-} > "$OUT_ROOT/equal.json" 2> "$OUT_ROOT/equal.err"
  echo "serve-equal rc $? $(tail -1 "$OUT_ROOT/equal.json" | head -c 400)" | tee -a "$LOG"
fi

if has cascade; then
  echo "=== cascade (llama8b), CUDA cores then tensor cores" | tee -a "$LOG"
  make_models llama8b make
  for attn in ${CASCADE_ATTN:-simt tc}; do
    [ "$(left)" -gt 90 ] || break
    BRAID_CUDA_ATTN=$attn timeout 150 $BIN cascade --model $M/llama8b \
      --ctx 8192 --batches 64 --prefix 4096 --prompt 32 --gen 128 > "$OUT_ROOT/cascade_$attn.json" \
      2> "$OUT_ROOT/cascade.err"
    echo "cascade ($attn) rc $?" | tee -a "$LOG"
    grep -E "^cascade|^no prefix" "$OUT_ROOT/cascade.err" | tee -a "$LOG"
    tail -1 "$OUT_ROOT/cascade_$attn.json" | head -c 600 | tee -a "$LOG"; echo | tee -a "$LOG"
  done
fi

if has serve; then
  echo "=== offline serving, llama8b, 200 x 1024/1024 (braid bench --serve)" | tee -a "$LOG"
  # attention kernel:rate:tokens per step (0: the backend's default)
  for run in ${SERVE_RUNS:-simt:inf:0 tc:inf:0 tc:16:0}; do
    IFS=: read -r attn rate tokens step_ms weights kv <<< "$run"
    step_ms=${step_ms:-0}
    weights=${weights:-bf16}
    kv=${kv:-bf16}
    [ "$(left)" -gt 90 ] || break
    name=${attn}_${rate}_${tokens}_${step_ms}_${weights}_${kv}
    echo "--- $attn, rate $rate, batch tokens $tokens, step target $step_ms ms, $weights weights, $kv KV" | tee -a "$LOG"
    opt=(); [ $kv = bf16 ] || opt=(--kv $kv)
    BRAID_CUDA_ATTN=$attn timeout $(($(left) - 15)) build-gpu/frontend/braid bench --serve --device cuda \
      -m $M/llama8b --weights $weights "${opt[@]}" --rate $rate --batch-tokens $tokens --step-ms $step_ms --requests 200 \
      --prompt-len 1024 --gen-len 1024 \
      > "$OUT_ROOT/serve_$name.txt" 2>&1
    echo "rc $?" | tee -a "$LOG"
    grep -iE "tok/s|itl|error|^\| inf|^\| [0-9]|reached" "$OUT_ROOT/serve_$name.txt" | grep -v '^| rate' | head -8 | tee -a "$LOG"
  done
fi
echo "done in $(($(date +%s) - START)) s" | tee -a "$LOG"
