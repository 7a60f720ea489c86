#!/usr/bin/env bash
# The serving engine over the tensor-parallel path on one GPU
# (BRAID_CUDA_TP_ONE=1: cuda:0 opened as an NCCL group of one), from the
# repository root with the binaries in build-gpu/: OUT=DIR scripts/gpu/tp_serving.sh
# braid_gpu_check serve-equal on it (64 mixed requests batched against
# alone), then braid bench --serve (64 requests, 512 in / 256 out, all at
# once) without and with it. Writes OUT/equal_tp1.json and OUT/rate_tp{0,1}.txt.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
export BRAID_NCCL_LIBRARY=$(python3 -c "import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], 'lib', 'libnccl.so.2'))")
OUT_ROOT=$OUT
OUT=/tmp DEADLINE_S=150 scripts/gpu/run_all.sh --stages make --shapes llama8b > "$OUT_ROOT/make.log" 2>&1
M=/tmp/braid-gpu/models/llama8b
echo "== serve-equal, group of one"
BRAID_CUDA_TP_ONE=1 timeout 150 build-gpu/engine/braid_gpu_check serve-equal --model $M > $OUT_ROOT/equal_tp1.json 2> $OUT_ROOT/equal_tp1.err; echo "exit $?"; head -c 600 $OUT_ROOT/equal_tp1.json
for v in 0 1; do
  echo "== bench --serve, BRAID_CUDA_TP_ONE=$v"
  BRAID_CUDA_TP_ONE=$v timeout 120 build-gpu/frontend/braid bench --serve --device cuda:0 -m $M --rate inf --requests 64 \
    --prompt-len 512 --gen-len 256 > $OUT_ROOT/rate_tp$v.txt 2>&1; echo "exit $?"; grep -E "device|^\| inf" $OUT_ROOT/rate_tp$v.txt
done
