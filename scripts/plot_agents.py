#!/usr/bin/env python3
"""Tables and plots of scripts/bench_agents.py runs, merged over JSON files.

usage: plot_agents.py RUN.json [RUN.json ...] [--img docs/img/agents_NAME]

Several files (one per call on a machine that limits a command's time) are
merged: runs keyed by (policy, load), the later file winning. Prints per
offered load a markdown table with every policy's figures and its ratios to
the vllm and sglang baselines, then an ablation table at each load that has
braid variants. With --img PREFIX and matplotlib: PREFIX_throughput.png
(programs per minute against offered load, per policy) and PREFIX_p99.png
(p99 program latency against offered load, with the SLO when the runs
carry one).
"""
import argparse
import json

ORDER = ["vllm", "sglang", "braid", "braid-las", "braid-no-retain", "braid-lru", "braid-fcfs",
         "braid-plain-admit"]


def merge(paths):
    runs, slo, head = {}, {}, None
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        head = head or doc
        for r in doc.get("runs", []):
            if "metrics" in r:
                runs[(r["policy"], r["load"])] = r["metrics"]
        for name, ref in doc.get("reference", {}).items():
            if ref.get("state") == "done":
                slo[name] = doc.get("slo_factor", 2) * ref["latency_s"]
    return head, runs, slo


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--img", default="")
    opts = ap.parse_args()
    head, runs, slo = merge(opts.runs)
    print(f"cpu: {head.get('cpu')}; gpu: {head.get('gpu') or '-'}; device {head.get('device')}; "
          f"{head.get('programs')} programs; --kv-tokens {head.get('kv_tokens')}")
    if slo:
        print("SLO (p99 program latency): " +
              ", ".join(f"{k} alone x{head.get('slo_factor', 2):g} = {v:.1f} s"
                        for k, v in slo.items()))
    policies = [p for p in ORDER if any(k[0] == p for k in runs)]
    policies += sorted({k[0] for k in runs} - set(policies))
    loads = sorted({k[1] for k in runs})
    for load in loads:
        print(f"\n### offered load {load:g} programs/min\n")
        print("| policy | prog/min | vs vllm | vs sglang | mean s | p50 s | p99 s | p99 vs vllm "
              "| TTFT p99 s | KV hit | prompt computed | preempt | failed |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        base = runs.get(("vllm", load), {})
        sg = runs.get(("sglang", load), {})
        for p in policies:
            m = runs.get((p, load))
            if not m:
                continue
            print(f"| {p} | {m['programs_per_min']:.2f} | "
                  f"{ratio(m['programs_per_min'], base.get('programs_per_min'))} | "
                  f"{ratio(m['programs_per_min'], sg.get('programs_per_min'))} | "
                  f"{m['latency_mean_s']:.1f} | {m['latency_p50_s']:.1f} | "
                  f"{m['latency_p99_s']:.1f} | "
                  f"{ratio(m['latency_p99_s'], base.get('latency_p99_s'))} | "
                  f"{m['ttft_p99_s']:.2f} | {m['kv_hit_rate']:.3f} | "
                  f"{m['prompt_tokens_computed']} | {m['preemptions']} | {m['failed']} |")
    if not opts.img:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots")
        return
    for what, key, label in [("throughput", "programs_per_min", "programs completed per minute"),
                             ("p99", "latency_p99_s", "p99 program latency (s)")]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for p in policies:
            xs = [l for l in loads if (p, l) in runs]
            ax.plot(xs, [runs[(p, l)][key] for l in xs], marker="o", label=p)
        if what == "throughput":
            ax.plot(loads, loads, color="grey", linestyle=":", label="offered")
        elif "vllm" in slo:
            ax.axhline(slo["vllm"], color="grey", linestyle=":", label="SLO")
        ax.set_xlabel("offered load (programs per minute)")
        ax.set_ylabel(label)
        ax.set_title(f"agent serving, {head.get('gpu') or head.get('cpu')}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(f"{opts.img}_{what}.png", dpi=110)
        print(f"wrote {opts.img}_{what}.png")


if __name__ == "__main__":
    main()
