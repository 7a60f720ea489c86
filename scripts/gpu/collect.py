#!/usr/bin/env python3
"""Merges what run_all.sh's stages left in CACHE into one JSON and prints the
short table (last).

    python scripts/gpu/collect.py --cache /tmp/braid-gpu --out OUT/results.json --run-id ID

Reads, per shape: models/SHAPE/braid_init.json, ref/SHAPE/reference.json,
results/SHAPE.compare.json, results/SHAPE.{batch,decode,sweep}.out (the
engine's stdout: one JSON object), results/SHAPE.baselines.json; and
results/steps.tsv (every step of every run: run id, stage, shape, status,
seconds, command). Results from earlier runs on the same machine are kept,
so a run of one stage still reports the rest.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402


def read_json(path):
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}


def engine_json(path):
    """The JSON object an engine command printed: all of stdout, or failing
    that the last line that is a JSON object. None when nothing was printed."""
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        text = f.read()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            return obj
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {"unparsed_stdout": text[-2000:]} if text.strip() else None


def reference_summary(ref):
    if not ref or "prompts" not in ref:
        return ref
    gaps = [g for p in ref["prompts"] for g in p["gaps"]]
    return {"model": ref.get("model"), "attn": ref.get("attn_implementation"),
            "torch": ref.get("torch"), "transformers": ref.get("transformers"),
            "seconds_total": ref.get("seconds_total"),
            "greedy_step_gap_min": min(gaps), "greedy_step_gap_median": sorted(gaps)[len(gaps) // 2],
            "prompt_gap_min": min(p["prompt_gap_min"] for p in ref["prompts"]),
            "distinct_greedy_tokens": [len(set(p["greedy"])) for p in ref["prompts"]]}


def read_steps(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 5:
                    rows.append({"run": parts[0], "stage": parts[1], "shape": parts[2],
                                 "status": parts[3], "seconds": float(parts[4] or 0),
                                 "command": parts[5] if len(parts) > 5 else ""})
    return rows


def sweep_line(sweep):
    """'batch 1: 700 tok/s (41%), batch 8: ...' from the engine's sweep rows."""
    if not isinstance(sweep, dict) or not isinstance(sweep.get("rows"), list):
        return None
    parts = []
    for row in sweep["rows"]:
        if not isinstance(row, dict):
            continue
        share = next((row[k] for k in ("roofline_share", "share") if isinstance(row.get(k), (int, float))), None)
        parts.append(f"batch {row.get('batch', '?')}: {fmt(row.get('tokens_per_s'), '.0f')} tok/s"
                     + (f" ({100 * share:.0f}%)" if share is not None else ""))
    return ", ".join(parts)


def fmt(v, spec):
    if v is None:
        return "-"
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def table(shapes, data):
    cols = ["shape", "cos min", "greedy", "batch", "braid tok/s", "roofline", "HF tok/s", "compiled tok/s"]
    rows = []
    for s in shapes:
        d = data[s]
        cmp_ = d.get("compare") or {}
        batch = d.get("batch") or {}
        dec = d.get("decode") or {}
        bl = d.get("baselines") or {}
        greedy = (f"{cmp_['greedy_identical']}/{cmp_['greedy_total']}" if "greedy_identical" in cmp_
                  else ("error" if "error" in cmp_ else None))
        verdict = {True: " PASS", False: " FAIL"}.get(cmp_.get("pass"), "")
        share = dec.get("roofline_share")
        hf = (bl.get("hf_generate") or {}).get("tokens_per_s")
        ct = (bl.get("compiled_torch") or {}).get("tokens_per_s")
        rows.append([s, fmt(cmp_.get("cosine_min"), ".6f"), (greedy + verdict) if greedy else "-",
                     f"{batch['identical']}/{batch['total']}" if "identical" in batch else "-",
                     fmt(dec.get("tokens_per_s"), ".1f"),
                     f"{100 * share:.0f}%" if isinstance(share, (int, float)) else "-",
                     fmt(hf, ".1f"), fmt(ct, ".1f")])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run-id", default="")
    ap.add_argument("--shapes", default="llama1b,llama8b,qwen2")
    ap.add_argument("--seconds", type=float, default=None)
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    res_dir = os.path.join(args.cache, "results")
    steps = read_steps(os.path.join(res_dir, "steps.tsv"))
    this_run = [r for r in steps if r["run"] == args.run_id]
    last = {}
    for r in steps:
        last[f"{r['stage']} {r['shape']}"] = {k: r[k] for k in ("run", "status", "seconds")}
    data = {}
    for s in shapes:
        base = os.path.join(res_dir, s)
        data[s] = {
            "checkpoint": read_json(os.path.join(args.cache, "models", s, "braid_init.json")),
            "reference": reference_summary(read_json(os.path.join(args.cache, "ref", s, "reference.json"))),
            "compare": read_json(base + ".compare.json"),
            "batch": engine_json(base + ".batch.out"),
            "decode": engine_json(base + ".decode.out"),
            "sweep": engine_json(base + ".sweep.out"),
            "baselines": read_json(base + ".baselines.json"),
        }
    out = {"run_id": args.run_id, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "seconds_this_run": args.seconds, "steps_this_run": this_run, "last_status": last,
           "shapes": data}
    gc.save_json(args.out, out)

    failed = [r for r in this_run if r["status"] != "ok"]
    print(f"\nsteps this run: {len(this_run)}, not ok: {len(failed)}"
          + (f", {args.seconds:.0f} s" if args.seconds is not None else ""))
    for r in failed:
        print(f"  {r['stage']} {r['shape']}: {r['status']}")
    for s in shapes:
        line = sweep_line(data[s].get("sweep"))
        if line:
            print(f"sweep {s}: {line}")
    print(f"full results: {args.out}\n")
    print(table(shapes, data))


if __name__ == "__main__":
    main()
