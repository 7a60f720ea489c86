#!/usr/bin/env bash
# Where a batch-1 decode step's time goes, on the GPU machine, from the
# repository root with the binaries packed by scripts/gpu/pack_braid.sh
# (carry build-gpu):
#   OUT=DIR [CMD=sweep] scripts/gpu/profile_step.sh SHAPE [braid_gpu_check options]
# Makes the shape's random-weight checkpoint if missing (run_all.sh make),
# times decode as usual (CMD=sweep: `braid_gpu_check sweep`, for a step of
# several sequences, say `--batches 192 --prompt 1536`), then has Nsight
# Compute time every kernel of the
# timed steps alone (braid_gpu_check marks them with the NVTX range
# decode_step; clocks left alone) and sums them per kernel and per step:
# OUT/ncu_SHAPE.csv, OUT/profile_SHAPE.txt. The step's time less the sum of
# its kernels' is what the boundaries between them cost.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT_ROOT=${OUT:?set OUT}
SHAPE=${1:?shape}
shift
BIN=build-gpu/engine/braid_gpu_check
M=/tmp/braid-gpu/models
[ -d "$M/$SHAPE" ] || OUT=$OUT_ROOT scripts/gpu/run_all.sh --stages make --shapes "$SHAPE" \
  > "$OUT_ROOT/make_$SHAPE.log" 2>&1
tag=$SHAPE${1:+_$(echo "$*" | tr -c 'a-z0-9' '_' | sed 's/_*$//')}
CMD=${CMD:-decode}
timeout 120 $BIN "$CMD" --model "$M/$SHAPE" --prompt 128 --gen 16 "$@" > "$OUT_ROOT/decode_$tag.json"
tail -1 "$OUT_ROOT/decode_$tag.json"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 400 "$NCU" --nvtx --nvtx-include "decode_step/" --launch-count 600 --clock-control none \
  --metrics gpu__time_duration.sum --csv --print-units base \
  $BIN "$CMD" --model "$M/$SHAPE" --prompt 128 --gen 8 "$@" > "$OUT_ROOT/ncu_$tag.csv" 2> "$OUT_ROOT/ncu_$tag.log"
echo "ncu rc $?"
python3 - "$OUT_ROOT/ncu_$tag.csv" "$OUT_ROOT/decode_$tag.json" <<'PY' | tee "$OUT_ROOT/profile_$tag.txt"
import csv, json, re, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, rows = rows[0], rows[1:]
name, metric, value = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
times = [(r[name], float(r[value].replace(",", ""))) for r in rows if r[metric] == "gpu__time_duration.sum"]
steps = sum(1 for n, _ in times if "EmbedKernel" in n)
if steps == 0:
    sys.exit(f"no complete step among {len(times)} kernels")
# Whole steps only: from the first embedding to before the last one's step ends.
starts = [i for i, (n, _) in enumerate(times) if "EmbedKernel" in n]
per = starts[1] - starts[0] if len(starts) > 1 else len(times) - starts[0]
times = times[starts[0]:starts[0] + per * (len(starts) - 1 if len(starts) > 1 else 1)]
steps = max(1, len(starts) - 1)
total = {}
count = {}
for n, t in times:
    short = re.sub(r"void |braid::kernels::cuda::|\(anonymous namespace\)::|<unnamed>::", "", n)
    short = re.sub(r"\(.*", "", short)
    total[short] = total.get(short, 0) + t
    count[short] = count.get(short, 0) + 1
j = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
# decode: tokens/s of one sequence; sweep: its rows' step time (the first row's)
step_us = 1e6 / j["tokens_per_s"] if "tokens_per_s" in j else 1e3 * j["rows"][0]["step_ms"]
kern_us = sum(total.values()) / steps / 1e3
print(f"kernels per step {per}, steps {steps}; step {step_us:.1f} us, kernels alone {kern_us:.1f} us, "
      f"boundaries {step_us - kern_us:.1f} us ({(step_us - kern_us) / per:.2f} us per kernel)")
for k, v in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"{v / steps / 1e3:10.1f} us/step {count[k] / steps:6.1f} launches  {v / count[k] / 1e3:8.2f} us each  {k[:110]}")
PY
