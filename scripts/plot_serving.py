#!/usr/bin/env python3
"""Plots serving throughput and p99 latency against concurrency from
bench/results/serve_t*.json (written by scripts/bench_cpu.sh) into
docs/img/serving.png. Needs matplotlib."""
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = os.path.join(os.path.dirname(__file__), "..")
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
for path in sorted(glob.glob(os.path.join(root, "bench/results/serve*_t*.json"))):
    data = json.load(open(path))
    levels = data["levels"]
    c = [x["concurrency"] for x in levels]
    label = os.path.basename(path)[:-5]
    ax1.plot(c, [x["decode_tok_s"] for x in levels], marker="o", label=label)
    ax2.plot(c, [x["itl_p99_ms"] for x in levels], marker="o", label=label + " ITL p99")
    ax2.plot(c, [x["ttft_p99_ms"] / 100 for x in levels], marker="x", linestyle="--",
             label=label + " TTFT p99 / 100")
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
ax1.set_ylabel("aggregate decode tokens/s")
ax2.set_ylabel("ms")
fig.suptitle("Braid serving engine, SmolLM2-135M Q4_1, CPU")
fig.tight_layout()
os.makedirs(os.path.join(root, "docs/img"), exist_ok=True)
fig.savefig(os.path.join(root, "docs/img/serving.png"), dpi=110)
print("wrote docs/img/serving.png")
