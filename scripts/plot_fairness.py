#!/usr/bin/env python3
"""Summary table and plots of scripts/bench_fairness.sh's runs.

usage: plot_fairness.py DIR [--img docs/img]

Reads DIR/overload_{fcfs,vtc,vtc_local}_rN.json and DIR/prefix_*.json
(braid bench --serve --rate --json), prints a markdown table per workload
(medians over rounds; ratios to fcfs) and draws:
  IMG/fairness_overload.png  each client's service per window over the run
                             (round 1), one panel per policy
  IMG/fairness_prefix.png    output tok/s and cached share per variant
"""
import argparse
import glob
import json
import os
import re
import statistics

POLICIES = [("overload_fcfs", "fcfs"), ("overload_vtc", "vtc"),
            ("overload_vtc_local", "vtc + locality 2000")]
PREFIX = [("prefix_fcfs", "fcfs"), ("prefix_vtc_wc0", "vtc, cache hits free"),
          ("prefix_vtc_local_wc0", "vtc + locality, hits free"),
          ("prefix_vtc_wc1", "vtc, hits priced (w_c=1)"),
          ("prefix_vtc_local_wc1", "vtc + locality, hits priced")]


def load(path):
    with open(path) as f:
        doc = json.load(f)
    return doc, doc["rates"][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--img", default="docs/img")
    a = ap.parse_args()

    rows = {}
    for stem, label in POLICIES:
        runs = sorted(glob.glob(os.path.join(a.dir, stem + "_r*.json")),
                      key=lambda p: int(re.search(r"_r(\d+)\.json$", p).group(1)))
        if runs:
            rows[stem] = (label, [load(p) for p in runs])
    if rows:
        cpu = next(iter(rows.values()))[1][0][0]["cpu"]
        print(f"overload ({cpu}); medians over rounds")
        print("| policy | rounds | output tok/s | vs fcfs | service diff max | mean | max vs fcfs |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        base = None
        for stem, (label, runs) in rows.items():
            tok = statistics.median(r["out_tok_s"] for _, r in runs)
            dmax = statistics.median(r["diff_max"] for _, r in runs)
            dmean = statistics.median(r["diff_mean"] for _, r in runs)
            if base is None:
                base = (tok, dmax)
            print(f"| {label} | {len(runs)} | {tok:.1f} | {tok / base[0]:.3f} | {dmax:.0f} | "
                  f"{dmean:.0f} | {dmax / base[1]:.2f} |")
            print("|  per round tok/s: " + ", ".join(f"{r['out_tok_s']:.1f}" for _, r in runs)
                  + " | | | | | | |")

    prefix = [(label, load(p)) for stem, label in PREFIX
              for p in [os.path.join(a.dir, stem + ".json")] if os.path.exists(p)]
    if prefix:
        print("\nshared prefixes (16 clients, 512-token prefix each, pool 4,096 tokens)")
        print("| variant | output tok/s | cached share | service diff max | mean |")
        print("|---|---:|---:|---:|---:|")
        for label, (_, r) in prefix:
            print(f"| {label} | {r['out_tok_s']:.1f} | {100 * r['cached_share']:.0f}% | "
                  f"{r['diff_max']:.0f} | {r['diff_mean']:.0f} |")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plots")
        return
    os.makedirs(a.img, exist_ok=True)
    if rows:
        fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), sharey=True)
        axes = axes if len(rows) > 1 else [axes]
        for ax, (stem, (label, runs)) in zip(axes, rows.items()):
            _, r = runs[0]
            w = r["window_s"]
            for c, client in enumerate(r["clients"]):
                xs = [(i + 0.5) * w for i in range(len(client["per_window"]))]
                ys = [v / w for v in client["per_window"]]
                ax.plot(xs, ys, marker="o", ms=3,
                        label=f"client{c} (sends {client['share']:g}x)")
            for i, busy in enumerate(r["contended"]):
                if busy:
                    ax.axvspan(i * w, (i + 1) * w, color="0.92", lw=0)
            ax.set_title(f"{label}: {r['out_tok_s']:.0f} tok/s, diff max {r['diff_max']:.0f}",
                         fontsize=9)
            ax.set_xlabel("time (s)")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("service per second\n(1 x prompt + 2 x generated tokens)")
        axes[0].legend(fontsize=8)
        fig.suptitle("Two clients above capacity, sending 1:2 (grey: both waiting)", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(a.img, "fairness_overload.png"), dpi=110)
        print("wrote", os.path.join(a.img, "fairness_overload.png"))
    if prefix:
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        labels = [label for label, _ in prefix]
        tok = [r["out_tok_s"] for _, (_, r) in prefix]
        bars = ax.barh(labels, tok, color="tab:blue")
        for b, (_, (_, r)) in zip(bars, prefix):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2,
                    f" {b.get_width():.0f} tok/s, {100 * r['cached_share']:.0f}% cached",
                    va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("output tokens/s")
        ax.set_xlim(0, max(tok) * 1.45)
        ax.set_title("16 clients, each with its own 512-token prefix; KV pool 4,096 tokens",
                     fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(a.img, "fairness_prefix.png"), dpi=110)
        print("wrote", os.path.join(a.img, "fairness_prefix.png"))


if __name__ == "__main__":
    main()
