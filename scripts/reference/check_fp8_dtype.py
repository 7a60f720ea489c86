#!/usr/bin/env python3
"""What transformers dequantizes an FP8 checkpoint into on a CPU, the rule
Braid's loader follows (Fp8LoadType in engine/model/model_file.cpp): the
tiny FP8 model of make_tiny_models.py saved with torch_dtype bfloat16, then
loaded with dtype "auto", bfloat16 and float32. Asserts that each matrix is
bf16(q * scale) for auto and bfloat16, and q * scale exactly for float32.

    python scripts/reference/check_fp8_dtype.py
"""
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_models as mt  # noqa: E402


def main():
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    spec = dict(next(s for s in mt.MODELS if s["name"] == "llama_tiny_fp8"))
    spec.update(name="fp8_bf16", dtype="bfloat16")
    with tempfile.TemporaryDirectory() as tmp:
        path = mt.build(spec, tmp)
        assert json.load(open(os.path.join(path, "config.json")))["torch_dtype"] == "bfloat16"
        br, bc = spec["fp8_block"]
        name = "model.layers.0.self_attn.q_proj.weight"
        with safe_open(os.path.join(path, "model.safetensors"), "pt") as st:
            q, s = st.get_tensor(name), st.get_tensor(name + "_scale_inv")
        deq = q.float() * s.repeat_interleave(br, 0).repeat_interleave(bc, 1)
        for dtype, want in (("auto", deq.bfloat16()), (torch.bfloat16, deq.bfloat16()),
                            (torch.float32, deq)):
            m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
            w = m.model.layers[0].self_attn.q_proj.weight
            assert w.dtype == want.dtype and torch.equal(w, want), (dtype, w.dtype)
            print(f"dtype {dtype}: {w.dtype}, equal to {want.dtype}(q * scale)")


if __name__ == "__main__":
    main()
