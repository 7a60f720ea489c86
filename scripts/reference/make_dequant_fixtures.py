#!/usr/bin/env python3
"""Dequantization fixtures for kernels/dequant_fixture_test.cpp.

For each type, writes tests/fixtures/dequant/<type>.raw (raw GGUF blocks) and
<type>.f32 (the float32 values gguf.quants.dequantize gives for them, little
endian). Quantized blocks are random bytes with their fp16 scales replaced by
finite random values (including a few subnormal and negative ones), so every bit
pattern of the packed quants is exercised. Float types are random values.

Run: /root/.venvs/ref/bin/python scripts/reference/make_dequant_fixtures.py
(numpy and gguf 0.19; deterministic, seed 1234).
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "dequant")
rng = np.random.default_rng(1234)


def random_halfs(n):
    """n finite fp16 scales: mostly normal magnitudes, a few subnormal, both signs."""
    mag = 2.0 ** rng.uniform(-14, 2, n)
    sign = np.where(rng.random(n) < 0.2, -1.0, 1.0)
    h = (mag * sign).astype(np.float16)
    # Two subnormals to exercise Fp16ToFp32's denormal path.
    h[0] = np.float16(3.0e-6)
    if n > 1:
        h[1] = np.float16(-5.9e-8)
    assert np.isfinite(h).all()
    return h


def quant_blocks(qtype, n_blocks, half_offsets):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in half_offsets:
        raw[:, off:off + 2] = random_halfs(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1), n_blocks * block_elems


def write(name, qtype, raw):
    expected = dequantize(raw, qtype).astype("<f4").reshape(-1)
    raw.tofile(os.path.join(OUT, name + ".raw"))
    expected.tofile(os.path.join(OUT, name + ".f32"))
    return raw.nbytes + expected.nbytes


def main():
    os.makedirs(OUT, exist_ok=True)
    total = 0
    # Float types: 256 values, including +-0, inf, a subnormal and large values.
    x = rng.standard_normal(256).astype(np.float32) * 3.0
    x[:6] = [0.0, -0.0, np.inf, -np.inf, 1e-40, 65504.0]
    total += write("f32", T.F32, x.view(np.uint8))
    h = x.astype(np.float16)
    h[6] = np.float16(6.0e-8)  # smallest fp16 subnormal
    total += write("f16", T.F16, h.view(np.uint8))
    b = rng.integers(0, 65536, size=256, dtype=np.uint16)
    b[(b & 0x7F80) == 0x7F80] &= 0xBFFF  # no inf/NaN exponents
    total += write("bf16", T.BF16, b.view(np.uint8))
    # Quantized types: (name, type, blocks, byte offsets of fp16 fields in a block).
    for name, qtype, n_blocks, halfs in [
        ("q4_0", T.Q4_0, 16, [0]),
        ("q4_1", T.Q4_1, 16, [0, 2]),
        ("q8_0", T.Q8_0, 16, [0]),
        ("q4_K", T.Q4_K, 6, [0, 2]),
        ("q6_K", T.Q6_K, 6, [208]),
        # Last, so that the random stream of the types above (and their files) is unchanged.
        ("q5_0", T.Q5_0, 16, [0]),
    ]:
        raw, _ = quant_blocks(qtype, n_blocks, halfs)
        total += write(name, qtype, raw)
    print(f"wrote fixtures to {os.path.normpath(OUT)}: {total} bytes", file=sys.stderr)
    assert total < 200 * 1024


if __name__ == "__main__":
    main()
