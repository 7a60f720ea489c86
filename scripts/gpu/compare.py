#!/usr/bin/env python3
"""Compares the engine's logits and greedy tokens with the transformers reference.

    python scripts/gpu/compare.py --ref /tmp/braid-gpu/ref/llama1b --braid /tmp/braid-gpu/braid/llama1b

REF is hf_reference.py's folder (prompts.json, reference.json, ref_p{i}.f32).
BRAID holds the engine's result.json:
    {"prompts": [{"greedy": [32 ids], "logits": "p0.f32", "n_tokens": T}, ...], ...}
and the raw little-endian float32 [T, vocab] logits files it names.

Per prompt position: cosine similarity of the logit vectors, max |diff|, and
whether the argmax agrees; per prompt: whether the greedy continuation is
identical and, where not, the first differing step with the reference's
top-1 minus top-2 gap there (a gap near bf16 resolution means a near-tie, not
a bug). Prints a summary and PASS/FAIL, writes everything as JSON (--out,
default BRAID/compare.json).

PASS: min cosine >= 0.999 over all positions of all prompts, and at least 4
of the 5 greedy continuations identical. Exit status 0 on PASS, 1 on FAIL,
2 when the inputs cannot be read.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

MIN_COSINE = 0.999
MIN_GREEDY = 4


def load_json(path):
    with open(path) as f:
        return json.load(f)


def cosine_rows(a, b):
    """a, b: [T, V] -> [T] cosine similarity in float64 (NaN/inf -> -1)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    num = (a * b).sum(axis=1)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = num / den
    cos[~np.isfinite(cos)] = -1.0
    return cos


def compare_prompt(i, ref_dir, braid_dir, ref_rec, prompt, braid_rec, vocab):
    t = len(prompt)
    out = {"prompt": i, "n_tokens": t}
    if braid_rec.get("n_tokens", t) != t:
        raise ValueError(f"prompt {i}: engine n_tokens {braid_rec.get('n_tokens')} != {t}")
    ref = gc.read_f32(os.path.join(ref_dir, ref_rec["logits"]), vocab)
    got = gc.read_f32(os.path.join(braid_dir, braid_rec["logits"]), vocab)
    if ref.shape != (t, vocab) or got.shape != (t, vocab):
        raise ValueError(f"prompt {i}: logits shapes ref {ref.shape}, engine {got.shape}, expected {(t, vocab)}")
    cos = cosine_rows(ref, got)
    finite = np.isfinite(got).all(axis=1)
    diff = np.abs(got.astype(np.float64) - ref)
    diff[~np.isfinite(diff)] = np.inf
    top_ref = ref.argmax(axis=1)
    top_got = np.where(finite, got.argmax(axis=1), -1)
    agree = top_ref == top_got
    srt = np.sort(ref, axis=1)
    ref_gap = srt[:, -1] - srt[:, -2]
    out.update(cos_min=float(cos.min()), cos_mean=float(cos.mean()),
               cos_min_pos=int(cos.argmin()), max_abs_diff=float(diff.max()),
               nonfinite_positions=int((~finite).sum()),
               top1_agree=int(agree.sum()),
               top1_disagree=[{"pos": int(p), "ref": int(top_ref[p]), "braid": int(top_got[p]),
                               "ref_gap": float(ref_gap[p])} for p in np.flatnonzero(~agree)[:8]])
    want = ref_rec["greedy"]
    have = [int(x) for x in braid_rec.get("greedy", [])]
    out["greedy_identical"] = have == want
    if have != want:
        step = next((k for k, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
        out["first_diff_step"] = step
        out["ref_token"] = want[step] if step < len(want) else None
        out["braid_token"] = have[step] if step < len(have) else None
        out["ref_gap_at_diff"] = ref_rec["gaps"][step] if step < len(ref_rec["gaps"]) else None
        out["braid_greedy_len"] = len(have)
    return out, cos, diff, agree


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--braid", required=True)
    ap.add_argument("--out", default=None, help="JSON summary (default BRAID/compare.json)")
    ap.add_argument("--min-cosine", type=float, default=MIN_COSINE)
    ap.add_argument("--min-greedy", type=int, default=MIN_GREEDY)
    args = ap.parse_args()
    out_path = args.out or os.path.join(args.braid, "compare.json")
    try:
        prompts = load_json(os.path.join(args.ref, "prompts.json"))["prompts"]
        reference = load_json(os.path.join(args.ref, "reference.json"))
        result = load_json(os.path.join(args.braid, "result.json"))
        vocab = reference["vocab_size"]
        braid_prompts = result["prompts"]
        if len(braid_prompts) != len(prompts):
            raise ValueError(f"engine wrote {len(braid_prompts)} prompts, reference has {len(prompts)}")
        per_prompt, all_cos, all_diff, all_agree = [], [], [], []
        for i, (p, r, b) in enumerate(zip(prompts, reference["prompts"], braid_prompts)):
            rec, cos, diff, agree = compare_prompt(i, args.ref, args.braid, r, p, b, vocab)
            per_prompt.append(rec)
            all_cos.append(cos)
            all_diff.append(diff.max())
            all_agree.append(agree)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"[compare] ERROR: {type(e).__name__}: {e}")
        gc.save_json(out_path, {"pass": False, "error": f"{type(e).__name__}: {e}",
                                "ref": os.path.abspath(args.ref), "braid": os.path.abspath(args.braid)})
        sys.exit(2)

    cos = np.concatenate(all_cos)
    agree = np.concatenate(all_agree)
    identical = sum(r["greedy_identical"] for r in per_prompt)
    ok_cos = bool(cos.min() >= args.min_cosine)
    ok_greedy = identical >= args.min_greedy
    summary = {
        "pass": ok_cos and ok_greedy,
        "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
        "max_abs_diff": float(max(all_diff)),
        "top1_agreement": float(agree.mean()), "positions": int(cos.size),
        "greedy_identical": identical, "greedy_total": len(per_prompt),
        "criteria": {"min_cosine": args.min_cosine, "min_greedy_identical": args.min_greedy},
        "ref": os.path.abspath(args.ref), "braid": os.path.abspath(args.braid),
        "braid_meta": {k: v for k, v in result.items() if k != "prompts"},
        "prompts": per_prompt,
    }
    gc.save_json(out_path, summary)

    print(f"{'prompt':>6} {'T':>4} {'cos min':>9} {'cos mean':>9} {'max|diff|':>9} {'top1':>9}  greedy")
    for r in per_prompt:
        g = "identical" if r["greedy_identical"] else (
            f"differs at step {r['first_diff_step']} (ref {r['ref_token']} vs {r['braid_token']}, "
            f"ref gap {r['ref_gap_at_diff'] if r['ref_gap_at_diff'] is None else round(r['ref_gap_at_diff'], 4)})")
        print(f"{r['prompt']:>6} {r['n_tokens']:>4} {r['cos_min']:>9.6f} {r['cos_mean']:>9.6f} "
              f"{r['max_abs_diff']:>9.4g} {r['top1_agree']:>5}/{r['n_tokens']:<3}  {g}")
    verdict = "PASS" if summary["pass"] else "FAIL"
    why = []
    if not ok_cos:
        why.append(f"cosine min {cos.min():.6f} < {args.min_cosine}")
    if not ok_greedy:
        why.append(f"greedy identical {identical}/{len(per_prompt)} < {args.min_greedy}")
    print(f"[compare] {verdict}: cosine min {cos.min():.6f} mean {cos.mean():.6f}, "
          f"max |diff| {max(all_diff):.4g}, top-1 agreement {agree.mean():.4f} over {cos.size} positions, "
          f"greedy identical {identical}/{len(per_prompt)}" + (f" ({'; '.join(why)})" if why else ""))
    if not math.isfinite(summary["max_abs_diff"]):
        print("[compare] the engine's logits contain NaN or inf")
    sys.exit(0 if summary["pass"] else 1)


if __name__ == "__main__":
    main()
