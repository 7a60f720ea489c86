#!/usr/bin/env python3
"""Plots the CUDA backend's decode sweep (braid_gpu_check sweep, batches of
B sequences at 512 + 128 tokens) from a run_all.sh results.json into
docs/img/gpu_sweep.png: tokens/s against the batch, next to the roofline
(weights + KV read once per step at the copy bandwidth) and cuBLAS's own
GEMM rate at that batch. Needs matplotlib.

    scripts/gpu/plot_sweep.py RESULTS.json [SHAPE] [OUT.png]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = os.path.join(os.path.dirname(__file__), "..", "..")
path = sys.argv[1]
shape = sys.argv[2] if len(sys.argv) > 2 else "llama8b"
out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(root, "docs/img/gpu_sweep.png")
rows = json.load(open(path))["shapes"][shape]["sweep"]["rows"]
b = [r["batch"] for r in rows]
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(b, [r["tokens_per_s"] for r in rows], marker="o", label="Braid decode")
ax.plot(b, [r["roofline_tokens_per_s"] for r in rows], linestyle="--",
        label="roofline (weights + KV at copy bandwidth)")
ax.plot(b, [r["cublas_tokens_per_s"] for r in rows], linestyle=":",
        label="cuBLAS GEMMs alone (graph replay)")
for r in rows:
    ax.annotate(f'{100 * r["roofline_share"]:.0f}%', (r["batch"], r["tokens_per_s"]),
                textcoords="offset points", xytext=(4, -12), fontsize=8)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("sequences decoding together (512 prompt + 128 generated tokens)")
ax.set_ylabel("decode tokens/s")
ax.set_title(f"{shape} shape, bf16, one H200")
ax.grid(True, alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out, dpi=110)
print("wrote", out)
