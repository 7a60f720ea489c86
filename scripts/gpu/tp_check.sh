#!/usr/bin/env bash
# Tensor parallelism on a GPU machine, from the repository root with the
# binaries in build-gpu/ (braid_gpu_check built here, carried there):
#
#   OUT=/path/to/results [SHAPES="llama1b llama8b"] scripts/gpu/tp_check.sh [RANKS]
#
# Makes the SHAPES random-weight checkpoints (run_all.sh's make
# stage), then runs `braid_gpu_check tp --ranks RANKS` (default 2) on each:
# logits cosine and greedy continuations of the tensor-parallel backend
# against the one-GPU backend, and decode tokens/s. NCCL is taken from the
# nvidia-nccl wheel of the machine's Python, else the first libnccl.so.2
# found. Writes OUT/tp_SHAPE.json and prints a summary.
set -uo pipefail
RANKS=${1:-2}
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0  # no NVLink multicast
nccl=$(python3 -c "import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
[[ -f "$nccl" ]] || nccl=$(find / -name libnccl.so.2 2>/dev/null | head -1)
export BRAID_NCCL_LIBRARY=$nccl
echo "nccl: $nccl"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
lscpu | grep "Model name"
OUT_ROOT=$OUT
SHAPES=${SHAPES:-llama1b llama8b}
OUT=/tmp DEADLINE_S=240 scripts/gpu/run_all.sh --stages make --shapes "${SHAPES// /,}" > "$OUT_ROOT/make.log" 2>&1
for s in $SHAPES; do
  echo "== $s"
  timeout 200 build-gpu/engine/braid_gpu_check tp --model /tmp/braid-gpu/models/$s --ranks "$RANKS" \
    > "$OUT_ROOT/tp_$s.json" 2> "$OUT_ROOT/tp_$s.err"
  echo "exit $?"
  python3 -c "
import json
d = json.load(open('$OUT_ROOT/tp_$s.json'))
print('pass', d['pass'])
for v in d['variants']:
    print({k: v[k] for k in v if k != 'kernels'})
" || tail -20 "$OUT_ROOT/tp_$s.err"
done
