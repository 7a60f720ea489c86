#!/usr/bin/env python3
"""Measures what the seeded init of make_checkpoints.py gives, on the CPU.

For a shape (optionally narrowed by --width-div, keeping depth, head_dim and
vocabulary) it builds the model in float32 with gpu_common.init_weights and
prints:
  - the RMS of the residual stream after the embedding and after every layer,
  - beta: cosine between the current token's embedding and the final residual
    stream (the token's share that makes the next-token spike),
  - the top-1 minus top-2 logit gap over the 5 reference prompts' positions and
    32 greedy steps, in units of the logits' standard deviation over the
    vocabulary ("z-gap") and relative to |top-1|,
  - the relative logit noise of bfloat16 against float32 and whether the
    bfloat16 model's 32 greedy tokens equal float32's.

    python scripts/gpu/calibrate_init.py --shape llama1b --width-div 4
    python scripts/gpu/calibrate_init.py --shape llama8b --width-div 8 --embed-std 0.2
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

PROMPT_LENGTHS = [17, 33, 64, 100, 128]


def narrowed_config(shape, div):
    cfg = gc.make_config(shape)
    if div > 1:
        cfg.hidden_size //= div
        cfg.intermediate_size //= div
        cfg.num_attention_heads = max(1, cfg.num_attention_heads // div)
        cfg.num_key_value_heads = max(1, min(cfg.num_key_value_heads, cfg.num_attention_heads // 2))
    return cfg


def greedy(model, ids, n):
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                         eos_token_id=None)
    return out.sequences[0, len(ids):].tolist(), torch.stack([s[0].float() for s in out.logits])


def gap_stats(logits):
    top = logits.topk(2, dim=-1).values
    gap = top[:, 0] - top[:, 1]
    z = gap / logits.std(dim=-1)
    rel = gap / top[:, 0].abs()
    return z, rel


def q(t, p):
    return torch.quantile(t, p).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama1b", choices=sorted(gc.SHAPES))
    ap.add_argument("--width-div", type=int, default=4)
    ap.add_argument("--embed-std", type=float, default=None, help="override gpu_common.EMBED_STD")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 comparison")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.embed_std is not None:
        gc.EMBED_STD = args.embed_std
    from transformers import AutoModelForCausalLM
    cfg = narrowed_config(args.shape, args.width_div)
    cfg._attn_implementation = "eager"
    t0 = time.time()
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    gc.init_weights(model, args.seed, "cpu")
    print(f"{args.shape}/{args.width_div}: hidden {cfg.hidden_size}, layers {cfg.num_hidden_layers}, "
          f"heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, vocab {cfg.vocab_size}, "
          f"tied {cfg.tie_word_embeddings}, embed std {gc.EMBED_STD}")

    prompts = gc.random_prompts(1234, PROMPT_LENGTHS, cfg.vocab_size)
    # Residual stream RMS per layer and the token's share of the final stream.
    final_in = {}
    hook = model.model.norm.register_forward_hook(lambda m, i, o: final_in.__setitem__("x", i[0]))
    with torch.no_grad():
        ids = torch.tensor([prompts[-1]])
        out = model(ids, output_hidden_states=True)
    hook.remove()
    rms = [h.pow(2).mean().sqrt().item() for h in out.hidden_states[:-1]] + \
          [final_in["x"].pow(2).mean().sqrt().item()]
    emb = model.get_input_embeddings().weight[ids[0]]
    beta = torch.nn.functional.cosine_similarity(emb, final_in["x"][0], dim=-1)
    print("residual RMS per layer:", " ".join(f"{r:.2f}" for r in rms))
    print(f"beta (cos token embedding, final stream): median {beta.median():.3f} "
          f"min {beta.min():.3f} max {beta.max():.3f}")

    prompt_logits = torch.cat([model(torch.tensor([p])).logits[0].float() for p in prompts])
    runs32 = [greedy(model, p, args.gen) for p in prompts]
    gen_logits = torch.cat([lg for _, lg in runs32])
    for what, lg in (("prompt positions", prompt_logits), ("greedy steps", gen_logits)):
        z, rel = gap_stats(lg)
        print(f"{what:16s} n={len(z)}: z-gap min {z.min():.2f} p1 {q(z, .01):.2f} p10 {q(z, .1):.2f} "
              f"median {z.median():.2f}; rel gap min {rel.min():.3f} median {rel.median():.3f}; "
              f"P(z<0.1)={(z < 0.1).float().mean():.3f}; logit std {lg.std(-1).mean():.3g}")
    distinct = [len(set(t)) for t, _ in runs32]
    print(f"distinct tokens in each {args.gen}-token continuation: {distinct}")
    print("first continuation:", runs32[0][0][:12], "...")

    if not args.no_bf16:
        m16 = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        m16.load_state_dict(model.state_dict())
        m16 = m16.to(torch.bfloat16)
        runs16 = [greedy(m16, p, args.gen) for p in prompts]
        same = sum(a[0] == b[0] for a, b in zip(runs32, runs16))
        lg16 = torch.cat([m16(torch.tensor([p])).logits[0].float() for p in prompts])
        noise = (lg16 - prompt_logits).norm(dim=-1) / prompt_logits.norm(dim=-1)
        cos = torch.nn.functional.cosine_similarity(lg16, prompt_logits, dim=-1)
        top1 = (lg16.argmax(-1) == prompt_logits.argmax(-1)).float().mean()
        print(f"bf16 vs fp32: relative logit noise median {noise.median():.4f} max {noise.max():.4f}; "
              f"cosine min {cos.min():.5f}; prompt top-1 agreement {top1:.4f}; "
              f"identical greedy continuations {same}/{len(prompts)}")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
