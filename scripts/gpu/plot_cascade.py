#!/usr/bin/env python3
"""Plots `braid_gpu_check cascade` results into docs/img/gpu_cascade.png:
per configuration, the attention time of a decode step (left) and the decode
tokens/s (right) with the prefix read by every sequence from the paged cache
against cascade attention. Each file is the command's output (its last line
is the JSON). Needs matplotlib.

    scripts/gpu/plot_cascade.py LABEL=OUTPUT.txt [LABEL=OUTPUT.txt ...] [--out OUT.png]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = os.path.join(os.path.dirname(__file__), "..", "..")
out = os.path.join(root, "docs/img/gpu_cascade.png")
runs = []
args = sys.argv[1:]
while args:
    a = args.pop(0)
    if a == "--out":
        out = args.pop(0)
        continue
    label, path = a.split("=", 1)
    last = [line for line in open(path) if line.startswith("{")][-1]
    runs.append((label, json.loads(last)))
if not runs:
    sys.exit(__doc__)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
x = range(len(runs))
w = 0.38
labels = [label for label, _ in runs]
att_off = [r["attention_ms_per_step_off"] for _, r in runs]
att_on = [r["attention_ms_per_step_on"] for _, r in runs]
rows = [{row["phase"]: row for row in r["rows"]} for _, r in runs]
tok_off = [r["cascade off"]["decode_tokens_per_s"] for r in rows]
tok_on = [r["cascade on"]["decode_tokens_per_s"] for r in rows]
for ax, off, on, title in ((ax1, att_off, att_on, "attention per decode step (ms)"),
                           (ax2, tok_off, tok_on, "decode tokens/s")):
    ax.bar([i - w / 2 for i in x], off, w, label="paged (each sequence reads the prefix)")
    ax.bar([i + w / 2 for i in x], on, w, label="cascade (once per group)")
    for i in x:
        ratio = off[i] / on[i] if ax is ax1 else on[i] / off[i]
        ax.text(i + w / 2, on[i], f"{ratio:.2f}x", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
ax1.legend(fontsize=8)
fig.suptitle("Shared-prefix (cascade) attention, H200, greedy decode over one cached prefix")
fig.tight_layout()
fig.savefig(out, dpi=110)
print("wrote", out)
