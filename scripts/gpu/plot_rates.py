#!/usr/bin/env python3
"""Plots `braid bench --serve --rate` results (JSON from --json) into
docs/img/gpu_rates.png: output tokens/s against the request rate (left) and
the inter-token and first-token latency percentiles (right), one line per
file. Rates given as 'inf' (all at once) are left out of the plot. Needs
matplotlib.

    scripts/gpu/plot_rates.py LABEL=RESULT.json [LABEL=RESULT.json ...] [--out OUT.png]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = os.path.join(os.path.dirname(__file__), "..", "..")
out = os.path.join(root, "docs/img/gpu_rates.png")
series = []
args = sys.argv[1:]
while args:
    a = args.pop(0)
    if a == "--out":
        out = args.pop(0)
        continue
    label, path = a.split("=", 1)
    rows = []
    for part in path.split(","):  # several files of one label merge by rate
        rows += [r for r in json.load(open(part))["rates"] if r["rate"] > 0]
    rows.sort(key=lambda r: r["rate"])
    series.append((label, rows))
if not series:
    sys.exit(__doc__)
fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
for label, rows in series:
    x = [r["rate"] for r in rows]
    ax.plot(x, [r["out_tok_s"] for r in rows], marker="o", label=label)
    line, = bx.plot(x, [r["itl_p99_ms"] for r in rows], marker="o", label=f"{label} ITL p99")
    bx.plot(x, [r["itl_p50_ms"] for r in rows], marker=".", linestyle=":", color=line.get_color(),
            label=f"{label} ITL p50")
    bx.plot(x, [r["ttft_p99_ms"] for r in rows], marker="^", linestyle="--",
            color=line.get_color(), label=f"{label} TTFT p99")
ax.set_xscale("log", base=2)
ax.set_xlabel("request rate (requests/s, Poisson)")
ax.set_ylabel("output tokens/s")
ax.set_title("throughput vs request rate")
ax.grid(True, alpha=0.3)
ax.legend()
bx.set_xscale("log", base=2)
bx.set_yscale("log")
bx.set_xlabel("request rate (requests/s, Poisson)")
bx.set_ylabel("ms")
bx.set_title("latency percentiles")
bx.grid(True, alpha=0.3)
bx.legend(fontsize=7)
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
