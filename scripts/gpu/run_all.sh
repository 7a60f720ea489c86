#!/usr/bin/env bash
# The GPU machine's check-and-benchmark run. From the repository root:
#
#   OUT=/path/to/results scripts/gpu/run_all.sh [--stages make,ref,braid,compare,bench,baselines]
#       [--shapes llama1b,llama8b,qwen2] [--cache /tmp/braid-gpu] [--bin build-gpu/engine/braid_gpu_check]
#
# Environment (each also settable by the option in brackets):
#   OUT              result folder; receives results.json and run_all.log [--out]
#   CACHE            models, references, engine outputs (default /tmp/braid-gpu) [--cache]
#   BRAID_GPU_CHECK  the engine's check binary (default build-gpu/engine/braid_gpu_check) [--bin]
#   BRAID_GPU_FLAGS  more options of its run and batch commands (say "--kv fp8")
#   STAGES, SHAPES   as the options; PYTHON (default python3)
#   DEVICE           cuda (default), or cpu to try the scripts here with --shapes tiny,...
#                    (the Python steps then get --device cpu --tiny) [--device]
#   DEADLINE_S       seconds from start after which no new step starts (default 540), so
#                    the table is printed before a 600 s command limit
#
# Stages, run in this order for every shape:
#   make       random-weight bf16 checkpoints -> CACHE/models/SHAPE        (skipped when present)
#   ref        transformers logits + greedy   -> CACHE/ref/SHAPE           (skipped when present)
#   braid      $BIN run (prompts) and $BIN batch (32 ragged prompts)       -> CACHE/braid/SHAPE
#   compare    compare.py: logits cosine, greedy equality, PASS/FAIL
#   bench      $BIN decode (batch 1) and $BIN sweep (batches 1..128)
#   baselines  HF generate, compiled PyTorch decoder, copy bandwidth       (skipped when present)
# A failed step is recorded and the run goes on. Everything measured so far
# (this call and earlier calls on the same warm machine) is merged into
# OUT/results.json, and a short table is printed last.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/scripts/gpu"
OUT=${OUT:-}
CACHE=${CACHE:-/tmp/braid-gpu}
BIN=${BRAID_GPU_CHECK:-build-gpu/engine/braid_gpu_check}
STAGES=${STAGES:-make,ref,braid,compare,bench,baselines}
SHAPES=${SHAPES:-llama1b,llama8b,qwen2}
PYTHON=${PYTHON:-python3}
DEADLINE_S=${DEADLINE_S:-540}
DEVICE=${DEVICE:-cuda}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --stages) STAGES=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$OUT" ]]; then echo "set OUT (or --out) to the result folder" >&2; exit 2; fi
[[ "$BIN" = /* ]] || BIN="$ROOT/$BIN"
PYARGS=(--device "$DEVICE")
[[ "$DEVICE" == cpu ]] && PYARGS+=(--tiny)
mkdir -p "$OUT" "$CACHE/models" "$CACHE/ref" "$CACHE/braid" "$CACHE/results"
OUT=$(cd "$OUT" && pwd)
CACHE=$(cd "$CACHE" && pwd)
LOG="$OUT/run_all.log"
RUN_ID=$(date -u +%Y%m%dT%H%M%SZ)
STEPS="$CACHE/results/steps.tsv"   # run id, stage, shape, status, seconds, command

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1
export TOKENIZERS_PARALLELISM=false TORCHINDUCTOR_CACHE_DIR="$CACHE/inductor"
START=$(date +%s)

log() { echo "$*" | tee -a "$LOG"; }

has_stage() { [[ ",$STAGES," == *",$1,"* ]]; }

# step STAGE SHAPE TIMEOUT_S STDOUT_FILE|- -- CMD...: runs CMD under a timeout (cut to the
# time left before DEADLINE_S), output to the log (and stdout to STDOUT_FILE when given),
# and records the outcome. Never fails.
step() {
  local stage=$1 shape=$2 limit=$3 capture=$4
  shift 5
  local now left status rc=0 t0 t1
  now=$(date +%s)
  left=$((START + DEADLINE_S - now))
  if ((left < 20)); then
    log "=== [$stage $shape] skipped: ${DEADLINE_S}s deadline reached"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$RUN_ID" "$stage" "$shape" "skipped (deadline)" 0 "$*" >> "$STEPS"
    return 0
  fi
  ((limit > left)) && limit=$left
  log "=== [$stage $shape] $* (limit ${limit}s)"
  t0=$(date +%s.%N)
  if [[ "$capture" == "-" ]]; then
    timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG" || rc=${PIPESTATUS[0]}
  else
    timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$capture" 2> >(tee -a "$LOG" >&2) || rc=$?
    # The engine prints one JSON object; show it in the log too.
    head -c 4000 "$capture" | tee -a "$LOG"; echo | tee -a "$LOG"
  fi
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) status=ok ;;
    124|137) status="timeout after ${limit}s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  log "=== [$stage $shape] $status in ${secs}s"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$RUN_ID" "$stage" "$shape" "$status" "$secs" "$*" >> "$STEPS"
  return 0
}

fail_step() {  # fail_step STAGE SHAPE REASON: records a step that could not start
  log "=== [$1 $2] not run: $3"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$RUN_ID" "$1" "$2" "not run: $3" 0 "" >> "$STEPS"
}

log "run_all $RUN_ID: stages $STAGES, shapes $SHAPES, cache $CACHE, bin $BIN"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader \
    || echo "nvidia-smi unavailable"; } 2>&1 | tee -a "$LOG"
"$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__)' 2>&1 | tee -a "$LOG" || true

IFS=, read -r -a SHAPE_LIST <<< "$SHAPES"

if has_stage make; then
  for s in "${SHAPE_LIST[@]}"; do
    step make "$s" 400 - -- "$PYTHON" "$HERE/make_checkpoints.py" "${PYARGS[@]}" --out "$CACHE/models" \
      --shapes "$s"
  done
fi

for s in "${SHAPE_LIST[@]}"; do
  model="$CACHE/models/$s" ref="$CACHE/ref/$s" braid="$CACHE/braid/$s" res="$CACHE/results/$s"
  if has_stage ref; then
    step ref "$s" 300 - -- "$PYTHON" "$HERE/hf_reference.py" "${PYARGS[@]}" --model "$model" --out "$ref"
  fi
  if has_stage braid; then
    if [[ ! -x "$BIN" ]]; then
      fail_step braid "$s" "no engine binary at $BIN"
    elif [[ ! -f "$ref/prompts.json" ]]; then
      fail_step braid "$s" "no reference prompts (stage ref)"
    else
      rm -rf "$braid" && mkdir -p "$braid"
      rm -f "$res.batch.out"
      step braid "$s" 240 - -- "$BIN" run --model "$model" --device cuda --prompts "$ref/prompts.json" \
        --out-dir "$braid" ${BRAID_GPU_FLAGS:-}
      step batch "$s" 240 "$res.batch.out" -- "$BIN" batch --model "$model" \
        --prompts "$ref/batch_prompts.json" --gen 32 ${BRAID_GPU_FLAGS:-}
    fi
  fi
  if has_stage compare; then
    rm -f "$res.compare.json"
    step compare "$s" 120 - -- "$PYTHON" "$HERE/compare.py" --ref "$ref" --braid "$braid" \
      --out "$res.compare.json"
  fi
  if has_stage bench; then
    if [[ ! -x "$BIN" ]]; then
      fail_step bench "$s" "no engine binary at $BIN"
    else
      rm -f "$res.decode.out" "$res.sweep.out"
      step decode "$s" 240 "$res.decode.out" -- "$BIN" decode --model "$model" --prompt 128 --gen 128
      step sweep "$s" 400 "$res.sweep.out" -- "$BIN" sweep --model "$model" --batches 1,8,32,128 \
        --prompt 512 --gen 128
    fi
  fi
done

# Baselines last: the slowest (a torch.compile per shape) and only anchors.
if has_stage baselines; then
  for s in "${SHAPE_LIST[@]}"; do
    step baselines "$s" 420 - -- "$PYTHON" "$HERE/baselines.py" "${PYARGS[@]}" \
      --model "$CACHE/models/$s" --out "$CACHE/results/$s.baselines.json"
  done
fi

"$PYTHON" "$HERE/collect.py" --cache "$CACHE" --out "$OUT/results.json" --run-id "$RUN_ID" \
  --shapes "$SHAPES" --seconds "$(($(date +%s) - START))" 2>&1 | tee -a "$LOG" || true
