#!/usr/bin/env python3
"""Random-weight bf16 Hugging Face checkpoints at real model shapes.

    python scripts/gpu/make_checkpoints.py --out /tmp/braid-gpu/models --shapes llama1b,llama8b,qwen2
    python scripts/gpu/make_checkpoints.py --out /tmp/ck --device cpu --tiny      # CPU test

Each shape goes to OUT/<shape>/: config.json (classic layout: rope_theta and
rope_scaling, which Braid's loader reads), generation_config.json, the
safetensors weights (shards of at most 4 GB plus model.safetensors.index.json
when larger: llama8b is sharded) and braid_init.json (seed, init, versions,
seconds). The model is built by transformers in bfloat16 directly on the
device and initialised there. A shape whose directory already has
config.json and every shard is skipped; a run writes into OUT/<shape>.tmp and
renames it when complete. Each shape also gets a small tokenizer of its
family from the test fixtures (tokenizer.json and tokenizer_config.json, at
most 2,048 ids; added to a complete shape too), so that `braid run -m DIR`
and `braid bench --serve` can render text; the checks give token ids.

Shapes (gpu_common.SHAPES): llama1b = Llama-3.2-1B (tied, llama3 rope
scaling), llama8b = Llama-3-8B (untied), qwen2 = Qwen2.5-1.5B (QKV bias,
tied); qwen3 = Qwen3-1.7B (per-head q/k norms, tied); gemma3 = Gemma 3 1B
(q/k and post norms, GeGLU, scaled embeddings, head_dim 256, five sliding
layers to a global one, with a 64-position window instead of 512 so that the
check's prompts slide); llama70b = Llama-3-70B (untied; ~141 GB, so made with
--device cpu, for tensor parallelism over 4 GPUs; never a default); tiny,
tiny_untied, tiny_qwen2 for the CPU.

Why not transformers' own init
------------------------------
With HF's default init (every matrix N(0, 0.02^2)) the logits over a 128k
vocabulary are close to Gaussian, and the gap between the two largest of
~128k Gaussian samples is only ~0.2 standard deviations on average, with an
exponential-like distribution (many near-ties). bf16 alone moves the logits by
~1-2% of their spread (measured below), so two correct bf16 implementations
would pick different greedy tokens every few steps. A 32-token greedy match is
then a coin toss. No rescaling of Gaussian logits fixes that (the gap and the
noise scale together); what does is a top-1 that stands out by construction.

The init (gpu_common.init_weights, seeded; seed 1 unless --seed):
  - q/k/v/gate/up: N(0, 1/fan_in); o/down: N(0, 1/fan_in) / sqrt(2 L).
    Every layer's input is RMS-normalised, so the branches are O(1) and their
    sum over 2L branches stays O(1): the residual stream's RMS grows from 0.35
    (the embedding) to ~0.6 at the last layer for 16, 28 or 32 layers.
  - embeddings N(0, 0.35^2). The current token's embedding is then ~0.57 of
    the final stream (cosine beta; the rest, ~2/3 of its energy, comes from
    attention and MLPs, i.e. from the context). Through the output matrix that
    share gives one logit beta * sqrt(hidden) standard deviations above the
    rest, far above the largest of the other 128k (~4.9 standard deviations).
  - lm_head: tied shapes reuse the embedding, so the spike is on the current
    token itself (greedy repeats the last prompt token: a property of any
    tied random model whose residual carries the token). Untied (llama8b):
    lm_head row j = embedding row perm[j] for a seeded random permutation, so
    the spike is on perm^-1(t) and greedy walks a random permutation cycle:
    32 distinct tokens per continuation.
  - norms 1, q/k/v biases N(0, 0.1^2).
The bulk of the logit vector (which cosine similarity measures: the spike is
<1% of its energy) still depends on the whole context. The greedy check
therefore guards the decode loop (token fed back, positions, no corruption
large enough to move the spike); small attention errors show in the cosine of
the prompt logits, not in the greedy tokens.

Calibration (scripts/gpu/calibrate_init.py, CPU, float32, eager attention,
the 5 reference prompt lengths 17..128 plus 32 greedy steps each, full depth
and vocabulary; the first three rows narrowed in width, which makes the spike
*smaller* (it scales with sqrt(hidden)), so they are conservative):

  shape (width)       beta   z-gap prompt pos.    z-gap greedy steps   bf16 vs fp32
                      med    min / p1 / median    min / median         noise, cos min, greedy same
  llama1b/4 (512)     0.58   2.7 / 3.5 / 8.4      6.3 / 7.9            1.4%, 0.99986, 5/5
  llama8b/8 (512)     0.57   3.4 / 3.7 / 8.1      6.0 / 8.8            1.8%, 0.99975, 5/5
  qwen2/3 (512)       0.56   3.6 / 4.2 / 8.0      5.0 / 7.1            1.7%, 0.99978, 5/5
  llama1b (2048)      0.59   12.8 / 13.9 / 21.3   17.0 / 21.4          (not run: fp32 only)

z-gap = (top-1 - top-2) / std of the logits over the vocabulary; bf16 noise
= |logits_bf16 - logits_fp32| / |logits_fp32| per position (median), i.e.
~0.02 standard deviations on a difference of two logits. With Gaussian logits
over 128k tokens the z-gap averages ~0.2 and falls below that noise at about
one step in ten (and a numpy draw of 400 such vectors put the relative gap
under bf16's 0.4-0.8% resolution 11% of the time); here the smallest z-gap is
over 100x the noise, and relative gaps (top-1 - top-2) / |top-1| are >= 0.33
everywhere.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

TINY_SHAPES = "tiny,tiny_untied,tiny_qwen2"


def check_config(path, shape):
    """config.json says exactly what SHAPES asks for, whatever this
    transformers version did with the arguments."""
    with open(path) as f:
        c = json.load(f)
    want = dict(gc.SHAPES[shape][1])
    rope = dict(want.pop("rope_parameters"))
    if "full_attention" in rope:  # Gemma 3: one base per kind of layer
        want["rope_local_base_freq"] = rope.pop("sliding_attention")["rope_theta"]
        rope = dict(rope.pop("full_attention"))
    want["rope_theta"] = rope.pop("rope_theta")
    bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
    scaling = c.get("rope_scaling") or {"rope_type": "default"}
    if any(scaling.get(k) != v for k, v in rope.items()):
        bad["rope_scaling"] = (scaling, rope)
    if bad:
        raise RuntimeError(f"{path}: config differs from the shape (got, want): {bad}")


def make_one(shape, out_dir, device, seed, dtype, max_shard_size):
    import transformers
    from transformers import AutoModelForCausalLM
    final = os.path.join(out_dir, shape)
    if gc.checkpoint_complete(final):
        add_tokenizer(final, shape)
        print(f"[make] {shape}: complete in {final}, skipped", flush=True)
        return {"shape": shape, "path": final, "skipped": True}
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    t0 = time.time()
    cfg = gc.make_config(shape)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
        except TypeError:  # older transformers name it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype).eval()
    assert next(model.parameters()).dtype == dtype
    gc.init_weights(model, seed, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_init = time.time() - t0
    n_params = sum(p.numel() for p in model.parameters())
    kw = {"max_shard_size": max_shard_size}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kw["safe_serialization"] = True
    model.save_pretrained(tmp, **kw)
    gc.classic_config(os.path.join(tmp, "config.json"))
    check_config(os.path.join(tmp, "config.json"), shape)
    seconds = time.time() - t0
    info = {"shape": shape, "seed": seed, "dtype": str(dtype).replace("torch.", ""),
            "params": n_params, "init": "gpu_common.init_weights", "embed_std": gc.EMBED_STD,
            "bias_std": gc.BIAS_STD, "device": str(device), "seconds_init": round(t_init, 2),
            "seconds_total": round(seconds, 2), "torch": torch.__version__,
            "transformers": transformers.__version__}
    with open(os.path.join(tmp, "braid_init.json"), "w") as f:
        json.dump(info, f, indent=1)
    add_tokenizer(tmp, shape)
    os.replace(tmp, final)
    if not gc.checkpoint_complete(final):
        raise RuntimeError(f"{final}: incomplete after save")
    files = [os.path.basename(f) for f in gc.safetensors_files(final)]
    size = sum(os.path.getsize(os.path.join(final, f)) for f in files)
    print(f"[make] {shape}: {n_params / 1e9:.3f} B params, {size / 1e9:.2f} GB in {len(files)} file(s), "
          f"init {t_init:.1f} s, total {seconds:.1f} s -> {final}", flush=True)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    info.update(path=final, files=files, bytes=size, skipped=False)
    return info


# The test fixtures' tokenizer of each model type (tests/fixtures/tokenizer/).
FAMILY_TOKENIZER = {"llama": "llama3", "qwen2": "qwen2", "qwen3": "qwen2", "gemma3_text": "spm"}


def add_tokenizer(folder, shape):
    """Copies the family's fixture tokenizer into `folder` when its ids fit the vocabulary."""
    model_type, kw = gc.SHAPES[shape]
    name = FAMILY_TOKENIZER.get(model_type)
    if name is None:
        return
    src = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "tokenizer", name)
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    ids = [len(tok["model"]["vocab"])] + [a["id"] + 1 for a in tok.get("added_tokens", [])]
    if max(ids) > kw["vocab_size"]:
        return
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, file), os.path.join(folder, file))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder; each shape goes to OUT/<shape>")
    ap.add_argument("--shapes", default=None, help="comma list (default llama1b,llama8b,qwen2; "
                    f"with --tiny {TINY_SHAPES})")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="the tiny CPU test shapes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-shard-size", default="4GB")
    args = ap.parse_args()
    import transformers
    transformers.utils.logging.disable_progress_bar()
    shapes = (args.shapes or (TINY_SHAPES if args.tiny else "llama1b,llama8b,qwen2")).split(",")
    for s in shapes:
        if s not in gc.SHAPES:
            raise SystemExit(f"unknown shape {s!r}; known: {', '.join(sorted(gc.SHAPES))}")
    device = gc.pick_device(args.device)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    for s in shapes:
        make_one(s, args.out, device, args.seed, torch.bfloat16, args.max_shard_size)
    print(f"[make] done in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
