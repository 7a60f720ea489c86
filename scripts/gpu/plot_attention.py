#!/usr/bin/env python3
"""Plots the decode sweeps of scripts/gpu/attention_check.sh (braid_gpu_check
sweep with the CUDA-core decode attention kernel, BRAID_CUDA_ATTN=simt, and
the tensor-core one) into docs/img/gpu_sweep_attention.png: tokens/s against
the batch at each context, beside the roofline (weights + KV read once per
step at the copy bandwidth measured in the run). Needs matplotlib.

    scripts/gpu/plot_attention.py RESULTS_DIR [OUT.png]

RESULTS_DIR holds sweep_<context>_<simt|tc>.json.
"""
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = os.path.join(os.path.dirname(__file__), "..", "..")
src = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "docs/img/gpu_sweep_attention.png")
runs = {}
for path in glob.glob(os.path.join(src, "sweep_*_*.json")):
    m = re.match(r"sweep_(\d+)_(simt|tc)\.json", os.path.basename(path))
    if m:
        runs[(int(m.group(1)), m.group(2))] = json.load(open(path))
contexts = sorted({c for c, _ in runs})
fig, axes = plt.subplots(1, len(contexts), figsize=(5.5 * len(contexts), 4), squeeze=False)
for ax, ctx in zip(axes[0], contexts):
    for kind, label, style in (("simt", "CUDA cores (before)", "s-"), ("tc", "tensor cores", "o-")):
        if (ctx, kind) not in runs:
            continue
        rows = runs[(ctx, kind)]["rows"]
        b = [r["batch"] for r in rows]
        ax.plot(b, [r["tokens_per_s"] for r in rows], style, label=label)
        for r in rows:
            ax.annotate(f'{100 * r["roofline_share"]:.0f}%', (r["batch"], r["tokens_per_s"]),
                        textcoords="offset points", xytext=(4, -12 if kind == "simt" else 4),
                        fontsize=7)
    rows = runs.get((ctx, "tc"), runs.get((ctx, "simt")))["rows"]
    ax.plot([r["batch"] for r in rows], [r["roofline_tokens_per_s"] for r in rows], "k--",
            label="roofline (weights + KV at copy bandwidth)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"sequences decoding together ({ctx} prompt + 64 generated tokens)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(f"llama8b shape, bf16, one H100: context {ctx}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(out, dpi=120)
print(out)
