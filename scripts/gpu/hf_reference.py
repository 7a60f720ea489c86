#!/usr/bin/env python3
"""Reference logits and greedy continuations from transformers (bf16).

    python scripts/gpu/hf_reference.py --model /tmp/braid-gpu/models/llama1b --out /tmp/braid-gpu/ref/llama1b
    python scripts/gpu/hf_reference.py --model /tmp/ck/tiny --out /tmp/ref-tiny --device cpu --tiny

Writes into OUT:
  prompts.json        {"prompts": [[ids...] x 5], "greedy_tokens": 32}: seeded
                      random ids in [0, vocab), lengths 17, 33, 64, 100, 128
  ref_p{i}.f32        the logits at every prompt position: raw little-endian
                      float32, [T, vocab] row-major (T = len(prompt i))
  reference.json      per prompt: the 32-token greedy continuation
                      (model.generate, do_sample=False, no EOS stop) and, per
                      generated step, top-1 minus top-2 of that step's logits;
                      plus the smallest such gap over the prompt positions
  batch_prompts.json  32 seeded random prompts, lengths spread over 5..300,
                      same format, for the engine's batch-vs-single check

Skips the work when OUT/reference.json exists for the same model (--force
redoes it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

PROMPT_LENGTHS = [17, 33, 64, 100, 128]
GREEDY_TOKENS = 32
N_BATCH = 32
PROMPT_SEED = 1234
BATCH_SEED = 4321


def load_model(path, device, attn):
    model, how = gc.load_hf_model(path, device, attn)
    # Fixed-length greedy: nothing may stop generation early.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, how


def top2_gap(logits):
    """logits: [n, vocab] float -> [n] top-1 minus top-2."""
    top = logits.float().topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


@torch.no_grad()
def greedy(model, ids, n, device):
    x = torch.tensor([ids], device=device)
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
    tokens = out.sequences[0, len(ids):].tolist()
    step_logits = torch.stack([s[0] for s in out.logits]).float()  # [n, vocab], raw logits
    if len(tokens) != n:
        raise RuntimeError(f"generate returned {len(tokens)} tokens, expected {n}")
    argmax = step_logits.argmax(dim=-1).tolist()
    if argmax != tokens:
        raise RuntimeError("generate's tokens are not the argmax of its logits (a logits processor?)")
    return tokens, top2_gap(step_logits).tolist()


def check_rope(model_path, cfg):
    """The rope settings transformers read back from the classic config.json
    are the shape's (make_checkpoints.py rewrote the file)."""
    info = os.path.join(model_path, "braid_init.json")
    if not os.path.exists(info):
        return
    with open(info) as f:
        shape = json.load(f)["shape"]
    want = gc.SHAPES[shape][1]["rope_parameters"]
    rp = getattr(cfg, "rope_parameters", None)
    if not rp:  # a transformers that still keeps rope_theta / rope_scaling apart
        rp = dict(getattr(cfg, "rope_scaling", None) or {"rope_type": "default"})
        rp["rope_theta"] = cfg.rope_theta
    def part(got, want):  # the keys the shape names, per layer kind for Gemma 3
        return {k: part(got.get(k) or {}, v) if isinstance(v, dict) else got.get(k)
                for k, v in want.items()}
    got = part(rp, want)
    if got != want:
        raise RuntimeError(f"rope parameters read back as {got}, expected {want}")


def batch_prompts(vocab):
    rng = np.random.default_rng(BATCH_SEED)
    lengths = np.linspace(5, 300, N_BATCH).round().astype(int)
    rng.shuffle(lengths)
    return [rng.integers(0, vocab, size=int(n)).tolist() for n in lengths]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--tiny", action="store_true", help="CPU test run (same outputs, fewer threads)")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    import transformers
    transformers.utils.logging.disable_progress_bar()
    if args.tiny:
        torch.set_num_threads(1)
    model_path = os.path.abspath(args.model)
    ref_json = os.path.join(args.out, "reference.json")
    if not args.force and os.path.exists(ref_json):
        with open(ref_json) as f:
            if json.load(f).get("model") == model_path:
                print(f"[ref] {ref_json} exists for {model_path}, skipped", flush=True)
                return
    device = gc.pick_device(args.device)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    model, how = load_model(model_path, device, args.attn)
    t_load = time.time() - t0
    cfg = model.config
    vocab = cfg.vocab_size
    print(f"[ref] loaded {model_path} in {t_load:.1f} s: {cfg.model_type}, vocab {vocab}, "
          f"tied {cfg.tie_word_embeddings}, rope {getattr(cfg, 'rope_parameters', None)}, attn {args.attn}, via {how}",
          flush=True)

    check_rope(model_path, cfg)

    prompts = gc.random_prompts(PROMPT_SEED, PROMPT_LENGTHS, vocab)
    gc.save_json(os.path.join(args.out, "prompts.json"),
                 {"prompts": prompts, "greedy_tokens": GREEDY_TOKENS})
    gc.save_json(os.path.join(args.out, "batch_prompts.json"),
                 {"prompts": batch_prompts(vocab), "greedy_tokens": GREEDY_TOKENS})

    records = []
    for i, ids in enumerate(prompts):
        with torch.no_grad():
            logits = model(torch.tensor([ids], device=device)).logits[0].float()  # [T, vocab]
        assert logits.shape == (len(ids), vocab), logits.shape
        if not torch.isfinite(logits).all():
            raise RuntimeError(f"prompt {i}: non-finite logits")
        name = f"ref_p{i}.f32"
        gc.write_f32(os.path.join(args.out, name), logits.cpu().numpy())
        prompt_gaps = top2_gap(logits)
        tokens, gaps = greedy(model, ids, GREEDY_TOKENS, device)
        records.append({"n_tokens": len(ids), "logits": name, "greedy": tokens, "gaps": gaps,
                        "prompt_gap_min": prompt_gaps.min().item(),
                        "prompt_gap_median": prompt_gaps.median().item(),
                        "logit_std_mean": logits.std(dim=-1).mean().item()})
        print(f"[ref] prompt {i} (T={len(ids)}): greedy {tokens[:6]}..., step gap min {min(gaps):.3g}, "
              f"prompt gap min {prompt_gaps.min().item():.3g}", flush=True)
    seconds = time.time() - t0
    gc.save_json(ref_json, {
        "model": model_path, "model_type": cfg.model_type, "vocab_size": vocab,
        "dtype": "bfloat16", "attn_implementation": args.attn, "loaded_via": how, "device": str(device),
        "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "greedy_tokens": GREEDY_TOKENS, "prompt_seed": PROMPT_SEED,
        "seconds_load": round(t_load, 2), "seconds_total": round(seconds, 2),
        "prompts": records})
    print(f"[ref] wrote {args.out} in {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
