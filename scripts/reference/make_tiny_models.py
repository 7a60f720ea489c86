#!/usr/bin/env python3
"""Tiny random-weight HF checkpoints plus their logits fixtures.

Run (from the repository root, on a development machine, never in CI):

    /root/.venvs/ref/bin/python scripts/reference/make_tiny_models.py

For each model in MODELS it
  1. builds the architecture from a config with a fixed seed and non-trivially
     scaled random weights (so logits are not flat and top-1 is separated),
  2. saves it with save_pretrained (safetensors) in the listed dtype, single
     file or sharded (model.safetensors.index.json), into
     tests/fixtures/models/<name>/, and rewrites config.json in the classic
     layout real checkpoints use ("rope_theta" + "rope_scaling", "torch_dtype"),
  3. reloads it FROM DISK with AutoModelForCausalLM in float32 / eager
     attention (bf16/fp16 checkpoints are upcast exactly), and
  4. writes tests/fixtures/logits/<name>.bin (BRLG v1, scripts/reference/README.md)
     + <name>.json: 6 prompts of seeded random token ids (lengths 1..40),
     top-20 per position, last-position full logits (fp16), 64-token greedy
     continuation.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logits_fixtures import (REPO, compute_record, set_threads, summarize,  # noqa: E402
                                  verify_roundtrip, write_brlg, write_sidecar)

COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=512, max_position_embeddings=256, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2)

MODELS = [
    # name, model_type, extra config, dtype on disk, shard size (None = single file), seed
    dict(name="llama_tiny", arch="llama", seed=1, dtype="float32", shard=None,
         cfg=dict(num_hidden_layers=2, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="llama3_tiny_sharded", arch="llama", seed=2, dtype="float32", shard="300KB",
         embed_std=0.3, final_norm_scale=3.0,
         cfg=dict(num_hidden_layers=3, tie_word_embeddings=True,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 4.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 64})),
    dict(name="qwen2_tiny_bf16", arch="qwen2", seed=3, dtype="bfloat16", shard=None,
         embed_std=0.3, final_norm_scale=3.0,
         cfg=dict(num_hidden_layers=2, tie_word_embeddings=True, use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # An FP8 checkpoint in the fine-grained layout (transformers' FP8 quantizer,
    # DeepSeek-V3, Qwen3-FP8): every projection F8_E4M3 with a weight_scale_inv
    # per 32 x 16 block (non-square, so rows and columns cannot be swapped);
    # transformers dequantizes it when it loads on a CPU.
    dict(name="llama_tiny_fp8", arch="llama", seed=8, dtype="float32", shard=None,
         fp8_block=[32, 16],
         cfg=dict(num_hidden_layers=2, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="mistral_tiny_fp16", arch="mistral", seed=4, dtype="float16", shard=None,
         cfg=dict(num_hidden_layers=2, tie_word_embeddings=False, sliding_window=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Every layer slides (window 8): blocks that fall out of the window are
    # let go while a sequence runs.
    dict(name="mistral_sliding_tiny", arch="mistral", seed=7, dtype="float32", shard=None,
         cfg=dict(num_hidden_layers=2, tie_word_embeddings=False, sliding_window=8,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Per-head q/k norms, no biases.
    dict(name="qwen3_tiny", arch="qwen3", seed=5, dtype="float32", shard=None,
         embed_std=0.3, final_norm_scale=3.0,
         cfg=dict(num_hidden_layers=2, tie_word_embeddings=True, use_sliding_window=False,
                  head_dim=16, attention_bias=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma 3's block: q/k norms, post norms, GeGLU, scaled embeddings, a query
    # scale other than head_dim, head_dim * heads != hidden, and two sliding
    # layers (window 8, so most prompts and every continuation slide) around a
    # global one, each kind with its own RoPE base.
    dict(name="gemma3_tiny", arch="gemma3_text", seed=6, dtype="bfloat16", shard=None,
         embed_std=0.3, final_norm_scale=3.0,
         cfg=dict(num_hidden_layers=3, tie_word_embeddings=True, head_dim=32,
                  query_pre_attn_scalar=24, sliding_window=8,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                  hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                  attn_logit_softcapping=None,
                  rope_parameters={
                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                      "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})),
]

PROMPT_LENGTHS = [1, 4, 11, 19, 28, 40]
MIN_GAP = 1e-3     # redraw random prompts that contain a near-tie below this (prompt or generation)
MAX_REDRAWS = 50


def make_config(spec):
    from transformers import AutoConfig
    kw = dict(COMMON)
    kw.update(spec["cfg"])
    cfg = AutoConfig.for_model(spec["arch"], **kw)
    cfg._attn_implementation = "eager"
    return cfg


@torch.no_grad()
def init_weights(model, seed, embed_std=1.0, final_norm_scale=1.0):
    """Seeded, deliberately large-ish weights (std 0.1-1.0 by role) so logits are
    spread out.  Tied models use a smaller embedding std (else the input token's
    own embedding dominates the tied logits and greedy decoding repeats one
    token) and a larger final-norm gain, which scales all logits uniformly."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name == "model.norm.weight":
            p.copy_(final_norm_scale * (1.0 + 0.1 * torch.randn(p.shape, generator=g)))
        elif name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
        elif name.endswith("embed_tokens.weight"):
            p.copy_(embed_std * torch.randn(p.shape, generator=g))
        elif name.endswith(".bias"):
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        elif name == "lm_head.weight":
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
        elif "down_proj" in name:
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        else:
            p.copy_(0.15 * torch.randn(p.shape, generator=g))


def classic_config(path, dtype):
    """Rewrites transformers-5 config.json keys in the layout published
    checkpoints use (rope_theta / rope_scaling / torch_dtype)."""
    c = json.load(open(path))
    rp = c.pop("rope_parameters", None)
    if rp is not None and "full_attention" in rp:
        # Gemma 3: rope_theta for the global layers, rope_local_base_freq for the sliding ones.
        assert rp["full_attention"].get("rope_type", "default") == "default"
        c["rope_theta"] = rp["full_attention"]["rope_theta"]
        c["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
        c["rope_scaling"] = None
    elif rp is not None:
        rp = dict(rp)
        c["rope_theta"] = rp.pop("rope_theta")
        rp.pop("partial_rotary_factor", None)
        c["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
    c["torch_dtype"] = dtype
    c.pop("dtype", None)
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def to_fp8_blocks(path, block):
    """Rewrites the checkpoint at `path` with every *_proj.weight as
    float8_e4m3fn plus a float32 weight_scale_inv per block (max |w| / 448 of
    the block), and quantization_config in config.json, as transformers'
    fine-grained FP8 checkpoints are laid out."""
    from safetensors.torch import load_file, save_file
    br, bc = block
    f = os.path.join(path, "model.safetensors")
    sd = load_file(f)
    out = {}
    for k, v in sd.items():
        if not k.endswith("proj.weight"):
            out[k] = v
            continue
        n, kk = v.shape
        assert n % br == 0 and kk % bc == 0, (k, v.shape)  # transformers needs whole blocks
        blocks = v.reshape(n // br, br, kk // bc, bc)
        scale = blocks.abs().amax(dim=(1, 3)) / 448.0
        q = (blocks / scale[:, None, :, None]).reshape(n, kk).to(torch.float8_e4m3fn)
        out[k] = q
        out[k + "_scale_inv"] = scale.float().contiguous()
    save_file(out, f, metadata={"format": "pt"})
    c = json.load(open(os.path.join(path, "config.json")))
    c["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                "weight_block_size": [br, bc]}
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2, sort_keys=True)
        fh.write("\n")


def build(spec, models_dir):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(spec["seed"])
    cfg = make_config(spec)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    init_weights(model, spec["seed"], spec.get("embed_std", 1.0), spec.get("final_norm_scale", 1.0))
    if cfg.tie_word_embeddings:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    out = os.path.join(models_dir, spec["name"])
    shutil.rmtree(out, ignore_errors=True)
    to_save = model.to(getattr(torch, spec["dtype"]))
    kw = {"max_shard_size": spec["shard"]} if spec["shard"] else {"max_shard_size": "100MB"}
    to_save.save_pretrained(out, safe_serialization=True, **kw)
    classic_config(os.path.join(out, "config.json"), spec["dtype"])
    if spec.get("fp8_block"):
        to_fp8_blocks(out, spec["fp8_block"])
    files = sorted(glob.glob(os.path.join(out, "*.safetensors")))
    if spec["shard"]:
        assert len(files) > 1 and os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    else:
        assert [os.path.basename(f) for f in files] == ["model.safetensors"]
    return out


def load_reference(path):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    m = m.eval()
    assert m.dtype == torch.float32 and m.config._attn_implementation == "eager"
    return m


def check_weights_on_disk(path, spec, model):
    """The reloaded fp32 weights equal the stored tensors (upcast) exactly;
    FP8 ones equal their values times their block's scale."""
    from safetensors import safe_open
    sd = model.state_dict()
    seen = set()
    for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        with safe_open(f, "pt") as st:
            for k in st.keys():
                if k.endswith("_scale_inv"):
                    continue
                t = st.get_tensor(k)
                if t.dtype == torch.float8_e4m3fn:
                    br, bc = spec["fp8_block"]
                    s = st.get_tensor(k + "_scale_inv")
                    t = t.float() * s.repeat_interleave(br, 0).repeat_interleave(bc, 1)
                else:
                    assert str(t.dtype) == "torch." + spec["dtype"], (k, t.dtype)
                assert torch.equal(t.float(), sd[k]), k
                seen.add(k)
    expect = set(sd) - ({"lm_head.weight"} if model.config.tie_word_embeddings else set())
    assert seen == expect, seen ^ expect


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=os.path.join(REPO, "tests", "fixtures", "models"))
    ap.add_argument("--logits-dir", default=os.path.join(REPO, "tests", "fixtures", "logits"))
    ap.add_argument("--only", nargs="*", help="subset of model names")
    args = ap.parse_args(argv)
    set_threads()
    import transformers
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        path = build(spec, args.models_dir)
        model = load_reference(path)
        check_weights_on_disk(path, spec, model)
        want = spec["cfg"]["rope_parameters"]
        got = {k: model.config.rope_parameters.get(k) for k in want}
        got = {k: ({kk: v.get(kk) for kk in want[k]} if isinstance(v, dict) else v)
               for k, v in got.items()}
        assert got == want, (got, want)   # classic config.json re-read as intended
        rng = np.random.default_rng(1000 + spec["seed"])
        vocab = model.config.vocab_size
        records, redraws = [], []
        for i, n in enumerate(PROMPT_LENGTHS):
            # Redraw a prompt whose prompt or greedy steps have a top-1/top-2 gap
            # below MIN_GAP, so the exact parity bars are meaningful (recorded).
            for attempt in range(MAX_REDRAWS):
                ids = rng.integers(0, vocab, size=n).tolist()
                rec = compute_record(model, ids, f"rand{i}_len{n}")
                if min(rec["gaps"].min(), rec["gen_gaps"].min()) >= MIN_GAP:
                    break
            redraws.append(attempt)
            records.append(rec)
        out = os.path.join(args.logits_dir, spec["name"] + ".bin")
        write_brlg(out, records)
        verify_roundtrip(out, records)
        files = {os.path.basename(f): os.path.getsize(f) for f in sorted(glob.glob(path + "/*"))}
        meta = dict(model=os.path.relpath(path, REPO), architecture=spec["arch"],
                    dtype_on_disk=spec["dtype"], sharded=bool(spec["shard"]),
                    tie_word_embeddings=bool(model.config.tie_word_embeddings), seed=spec["seed"],
                    files=files,
                    safetensors_sha256={os.path.basename(f): hashlib.sha256(open(f, "rb").read()).hexdigest()
                                        for f in sorted(glob.glob(path + "/*.safetensors"))},
                    reference="reloaded from disk, float32, eager attention",
                    prompt_redraws=redraws, min_gap_target=MIN_GAP,
                    torch=torch.__version__, transformers=transformers.__version__,
                    command="python scripts/reference/make_tiny_models.py",
                    notes="prompt ids: numpy default_rng(1000+seed).integers(0, vocab, n); "
                          "greedy, exactly 64 tokens, no EOS stop")
        write_sidecar(out[:-4] + ".json", meta, records)
        print(f"[model] {os.path.relpath(path, REPO)}: " +
              ", ".join(f"{k} {v}" for k, v in files.items()))
        summarize(spec["name"], out, records)


if __name__ == "__main__":
    main()
