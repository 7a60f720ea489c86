#!/usr/bin/env python3
"""A tiny llama GGUF whose matrices are q4_K, q6_K and q5_0, the types of
Q4_K_M files that the CUDA backend converts on the host: for the CUDA
backend against the CPU's (braid_gpu_check compare-cpu, CTest
cuda_vs_cpu_llama_tiny_kquant). Writes
tests/fixtures/models/llama_tiny_kquant/model.gguf.

The blocks are random packed bytes with their fp16 scales set so that the
weights stay within about +-0.1 (random scales would make activations of any
size); the norms are f32 ones. Both backends dequantize the same blocks
(the CPU's dequantization is checked against gguf.quants by
tests/fixtures/dequant), so only the two engines are compared here.

Run: /root/.venvs/ref/bin/python scripts/reference/make_kquant_model.py
(numpy and gguf 0.19; deterministic, seed 7).
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "models",
                   "llama_tiny_kquant")
rng = np.random.default_rng(7)
N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV, N_VOCAB, N_CTX = 256, 512, 2, 4, 2, 512, 512


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(len(values), 2)


def blocks(qtype, rows, cols):
    """rows x cols weights as random blocks of `qtype` with bounded scales."""
    elems, size = GGML_QUANT_SIZES[qtype]
    assert cols % elems == 0
    n = rows * cols // elems
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    if qtype == T.Q4_K:  # d, dmin (fp16) first: d * scale(<64) * q(<16) - dmin * min(<64)
        raw[:, 0:2] = f16_bytes(rng.uniform(0.5, 1.0, n) * 0.1 / (63 * 15))
        raw[:, 2:4] = f16_bytes(rng.uniform(0.5, 1.0, n) * 0.05 / 63)
    elif qtype == T.Q6_K:  # d (fp16) last: d * scale(int8) * (q - 32)
        raw[:, size - 2:size] = f16_bytes(rng.uniform(0.5, 1.0, n) * 0.1 / (128 * 32))
    elif qtype == T.Q5_0:  # d (fp16) first: d * (q - 16)
        raw[:, 0:2] = f16_bytes(rng.uniform(0.5, 1.0, n) * 0.1 / 16)
    else:
        raise ValueError(qtype)
    return raw.reshape(rows, cols // elems * size)


def main():
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "model.gguf")
    w = GGUFWriter(path, "llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(N_VOCAB)
    # A byte-level BPE vocabulary of the 256 bytes (GPT-2's printable map),
    # one merge and filler tokens: the engine is given ids.
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    byte_chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            byte_chars[b] = chr(b)
        else:
            byte_chars[b] = chr(256 + extra)
            extra += 1
    tokens = [byte_chars[b] for b in range(256)] + ["ab"]
    tokens += [f"<t{i}>" for i in range(N_VOCAB - len(tokens))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * N_VOCAB)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(N_VOCAB - 2)
    w.add_eos_token_id(N_VOCAB - 1)
    head_dim = N_EMBD // N_HEAD

    def add(name, qtype, rows, cols):
        w.add_tensor(name, blocks(qtype, rows, cols), raw_dtype=qtype)

    add("token_embd.weight", T.Q6_K, N_VOCAB, N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        add(p + "attn_q.weight", T.Q4_K, N_HEAD * head_dim, N_EMBD)
        add(p + "attn_k.weight", T.Q4_K, N_HEAD_KV * head_dim, N_EMBD)
        add(p + "attn_v.weight", T.Q6_K, N_HEAD_KV * head_dim, N_EMBD)
        add(p + "attn_output.weight", T.Q4_K, N_EMBD, N_HEAD * head_dim)
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        add(p + "ffn_gate.weight", T.Q4_K, N_FF, N_EMBD)
        add(p + "ffn_up.weight", T.Q4_K, N_FF, N_EMBD)
        add(p + "ffn_down.weight", T.Q5_0, N_EMBD, N_FF)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    add("output.weight", T.Q6_K, N_VOCAB, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
