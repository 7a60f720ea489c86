#!/usr/bin/env python3
"""Reference logits fixtures for SmolLM2-135M-Instruct (Q4_1 GGUF).

Run (from the repository root, on a development machine, never in CI):

    /root/.venvs/ref/bin/python scripts/reference/make_logits_fixtures.py

Writes tests/fixtures/logits/smollm2_q4_1.bin (format "BRLG" v1, see
scripts/reference/README.md) and a human-readable sidecar
tests/fixtures/logits/smollm2_q4_1.json.

Model: the GGUF's weights are dequantized to float32 (Q4_1 / Q8_0 / F32) and
run by transformers' LlamaForCausalLM in float32 with eager attention.  Two
loaders exist and are cross-checked bit for bit when both are available:
  * "transformers": AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)
    (needs the `accelerate` package);
  * "manual": gguf.quants.dequantize + undoing convert_hf_to_gguf's Q/K row
    permutation, loaded into a LlamaForCausalLM built from the GGUF metadata.
The fixture is identical whichever loader is used (the weights are equal).

Prompts are tokenized with a `tokenizers` BPE built from the GGUF vocabulary
and merges (smollm pre-tokenizer: single digits, then GPT-2 byte-level); the
model is fed token ids, never text.

This file also holds the fixture writer shared with make_tiny_models.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np
import torch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAGIC = b"BRLG"
VERSION = 1
TOPK = 20
N_GEN = 64
NEAR_TIE = 1e-3      # top-1 vs top-2 gap below this: a near-tie the C++ test must tolerate
FAST_TIE = 0.1       # the fast-path bar's near-tie threshold (engineering-notes.md)


# ----------------------------------------------------------------------------
# Fixture computation and the BRLG writer (shared with make_tiny_models.py)
# ----------------------------------------------------------------------------

def topk_sorted(row: np.ndarray, k: int):
    """Top-k of one logit row: descending logit, ties broken by lower id."""
    order = np.argsort(-row, kind="stable")[:k]
    return order.astype(np.int32), row[order].astype(np.float32)


@torch.no_grad()
def compute_record(model, ids: list[int], name: str, text: str | None = None,
                   k: int = TOPK, n_gen: int = N_GEN) -> dict:
    """Runs one prompt: per-position top-k, last-position full logits and the
    greedy continuation of exactly n_gen tokens (no EOS stopping)."""
    assert model.dtype == torch.float32
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    inp = torch.tensor([ids], dtype=torch.long)
    logits = model(input_ids=inp, attention_mask=torch.ones_like(inp)).logits[0].float().numpy()
    n, vocab = logits.shape
    top_ids = np.zeros((n, k), np.int32)
    top_logits = np.zeros((n, k), np.float32)
    for p in range(n):
        top_ids[p], top_logits[p] = topk_sorted(logits[p], k)
    gaps = top_logits[:, 0] - top_logits[:, 1]

    from transformers import GenerationConfig
    gc = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n_gen, min_new_tokens=0,
                          eos_token_id=None, pad_token_id=0, bos_token_id=None,
                          temperature=None, top_p=None, top_k=None, repetition_penalty=None,
                          output_logits=True, return_dict_in_generate=True)
    model.generation_config.eos_token_id = None
    out = model.generate(inp, attention_mask=torch.ones_like(inp), generation_config=gc)
    gen = out.sequences[0, n:].tolist()
    assert len(gen) == n_gen, f"{name}: generate produced {len(gen)} tokens, expected {n_gen}"
    step_logits = torch.stack(out.logits, 0)[:, 0, :].float().numpy()  # raw logits per step
    gen_gaps = np.zeros(n_gen, np.float32)
    for i in range(n_gen):
        t_ids, t_val = topk_sorted(step_logits[i], 2)
        assert t_ids[0] == gen[i], f"{name}: step {i}: generate chose {gen[i]}, argmax {t_ids[0]}"
        gen_gaps[i] = t_val[0] - t_val[1]
    # The first generation step sees the same context as the last prompt position.
    assert gen[0] == int(top_ids[-1, 0])
    # Cross-check the KV-cached generation against one uncached forward pass over
    # prompt + continuation (argmax may only differ at a near-exact tie).
    full = torch.tensor([list(ids) + gen[:-1]], dtype=torch.long)
    fl = model(input_ids=full, attention_mask=torch.ones_like(full)).logits[0, n - 1:].float().numpy()
    for i in range(n_gen):
        if int(np.argmax(fl[i])) != gen[i]:
            assert gen_gaps[i] < 1e-4, f"{name}: step {i}: cached/uncached argmax differ"
            print(f"[warn] {name}: gen step {i}: uncached argmax differs at gap {gen_gaps[i]:.3g}")
    return dict(name=name, text=text, ids=list(map(int, ids)), k=k, top_ids=top_ids,
                top_logits=top_logits, gaps=gaps.astype(np.float32),
                last_logits=logits[-1].astype(np.float16), n_vocab=vocab,
                gen=list(map(int, gen)), gen_gaps=gen_gaps)


def write_brlg(path: str, records: list[dict]) -> None:
    """Writes the BRLG v1 format (little-endian); see scripts/reference/README.md."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<II", VERSION, len(records)))
        for r in records:
            n = len(r["ids"])
            f.write(struct.pack("<I", n))
            f.write(np.asarray(r["ids"], "<i4").tobytes())
            f.write(struct.pack("<I", r["k"]))
            for p in range(n):
                f.write(np.asarray(r["top_ids"][p], "<i4").tobytes())
                f.write(np.asarray(r["top_logits"][p], "<f4").tobytes())
            f.write(struct.pack("<I", r["n_vocab"]))
            f.write(np.asarray(r["last_logits"], "<f2").tobytes())
            f.write(struct.pack("<I", len(r["gen"])))
            f.write(np.asarray(r["gen"], "<i4").tobytes())
            f.write(np.asarray(r["gen_gaps"], "<f4").tobytes())


def read_brlg(path: str) -> list[dict]:
    """Independent reader, used to verify every written file round-trips."""
    data = open(path, "rb").read()
    off = 0

    def take(fmt_or_dtype, count=None):
        nonlocal off
        if count is None:
            v = struct.unpack_from(fmt_or_dtype, data, off)
            off += struct.calcsize(fmt_or_dtype)
            return v
        dt = np.dtype(fmt_or_dtype)
        a = np.frombuffer(data, dt, count, off)
        off += dt.itemsize * count
        return a

    assert data[:4] == MAGIC
    off = 4
    version, n_prompts = take("<II")
    assert version == VERSION
    recs = []
    for _ in range(n_prompts):
        (n,) = take("<I")
        ids = take("<i4", n)
        (k,) = take("<I")
        top_ids = np.zeros((n, k), np.int32)
        top_logits = np.zeros((n, k), np.float32)
        for p in range(n):
            top_ids[p] = take("<i4", k)
            top_logits[p] = take("<f4", k)
        (nv,) = take("<I")
        last = take("<f2", nv)
        (ng,) = take("<I")
        gen = take("<i4", ng)
        gen_gaps = take("<f4", ng)
        recs.append(dict(ids=ids, k=k, top_ids=top_ids, top_logits=top_logits, n_vocab=nv,
                         last_logits=last, gen=gen, gen_gaps=gen_gaps))
    assert off == len(data), (off, len(data))
    return recs


def verify_roundtrip(path: str, records: list[dict]) -> None:
    back = read_brlg(path)
    assert len(back) == len(records)
    for a, b in zip(records, back):
        assert list(a["ids"]) == b["ids"].tolist()
        assert np.array_equal(a["top_ids"], b["top_ids"])
        assert np.array_equal(a["top_logits"], b["top_logits"])
        assert np.array_equal(np.asarray(a["last_logits"]).view(np.uint16),
                              b["last_logits"].view(np.uint16))
        assert list(a["gen"]) == b["gen"].tolist()
        assert np.array_equal(a["gen_gaps"], b["gen_gaps"])


def near_ties(gaps: np.ndarray, thr: float) -> list[list]:
    return [[int(i), float(g)] for i, g in enumerate(gaps) if g < thr]


def write_sidecar(path: str, meta: dict, records: list[dict], decode=None) -> None:
    prompts = []
    for r in records:
        e = dict(name=r["name"], n_prompt=len(r["ids"]), ids=r["ids"], n_gen=len(r["gen"]),
                 gen_ids=r["gen"],
                 min_prompt_gap=float(r["gaps"].min()), min_gen_gap=float(r["gen_gaps"].min()),
                 prompt_near_ties_lt_1e_3=near_ties(r["gaps"], NEAR_TIE),
                 gen_near_ties_lt_1e_3=near_ties(r["gen_gaps"], NEAR_TIE),
                 prompt_gaps_lt_0_1=near_ties(r["gaps"], FAST_TIE),
                 gen_gaps_lt_0_1=near_ties(r["gen_gaps"], FAST_TIE))
        if r.get("text") is not None:
            e["text"] = r["text"]
        if decode is not None:
            e["gen_text"] = decode(r["gen"])
        prompts.append(e)
    meta = dict(meta)
    meta["format"] = "BRLG v1 (scripts/reference/README.md)"
    meta["binary_sha256"] = hashlib.sha256(open(path[:-5] + ".bin", "rb").read()).hexdigest()
    meta["prompts"] = prompts
    with open(path, "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")


def summarize(label: str, path: str, records: list[dict]) -> None:
    print(f"== {label}: {os.path.relpath(path, REPO)}  {os.path.getsize(path)} bytes")
    for r in records:
        g, gg = r["gaps"], r["gen_gaps"]
        print(f"  {r['name']:<14} n_prompt={len(r['ids']):4d}  prompt gap: min={g.min():.3g} "
              f"frac<1e-3={np.mean(g < NEAR_TIE):.4f} (n={int(np.sum(g < NEAR_TIE))}) "
              f"frac<0.1={np.mean(g < FAST_TIE):.3f} | gen gap: min={gg.min():.3g} "
              f"n<1e-3={int(np.sum(gg < NEAR_TIE))} n<0.1={int(np.sum(gg < FAST_TIE))}")
        for p, gap in near_ties(g, NEAR_TIE):
            print(f"     near-tie prompt pos {p}: ids {r['top_ids'][p][:2].tolist()} gap {gap:.3g}")
        for p, gap in near_ties(gg, NEAR_TIE):
            print(f"     near-tie gen step {p}: gap {gap:.3g}")


def set_threads():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.manual_seed(0)


# ----------------------------------------------------------------------------
# SmolLM2 GGUF: tokenizer and model
# ----------------------------------------------------------------------------

def gguf_field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def build_tokenizer(reader):
    """SmolLM2 reference tokenizer from the GGUF's vocabulary and merges."""
    from tokenizers import Tokenizer, AddedToken, decoders, models, pre_tokenizers
    tokens = gguf_field(reader, "tokenizer.ggml.tokens")
    types = gguf_field(reader, "tokenizer.ggml.token_type")
    merges = gguf_field(reader, "tokenizer.ggml.merges")
    assert gguf_field(reader, "tokenizer.ggml.model") == "gpt2"
    assert gguf_field(reader, "tokenizer.ggml.pre") == "smollm"
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                               fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    special = [AddedToken(tokens[i], special=True, normalized=False)
               for i, t in enumerate(types) if t in (3, 4)]   # control, user-defined
    tok.add_special_tokens(special)
    for a in special:
        assert tok.token_to_id(a.content) == vocab[a.content]
    return tok


def load_manual(reader):
    """LlamaForCausalLM (fp32, eager) from the GGUF via gguf.quants.dequantize."""
    from gguf.quants import dequantize
    from transformers import LlamaConfig, LlamaForCausalLM
    a = "llama"
    g = lambda k, d=None: (gguf_field(reader, k) if gguf_field(reader, k) is not None else d)
    n_head = int(g(f"{a}.attention.head_count"))
    n_kv = int(g(f"{a}.attention.head_count_kv", n_head))
    n_embd = int(g(f"{a}.embedding_length"))
    tensors = {t.name: t for t in reader.tensors}
    n_vocab = int(g(f"{a}.vocab_size", tensors["token_embd.weight"].shape[1]))
    hd = n_embd // n_head
    assert int(g(f"{a}.rope.dimension_count", hd)) == hd
    tied = "output.weight" not in tensors
    cfg = LlamaConfig(
        vocab_size=n_vocab, hidden_size=n_embd,
        intermediate_size=int(g(f"{a}.feed_forward_length")),
        num_hidden_layers=int(g(f"{a}.block_count")), num_attention_heads=n_head,
        num_key_value_heads=n_kv, max_position_embeddings=int(g(f"{a}.context_length")),
        rms_norm_eps=float(g(f"{a}.attention.layer_norm_rms_epsilon")),
        rope_parameters={"rope_type": "default", "rope_theta": float(g(f"{a}.rope.freq_base", 10000.0))},
        tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
        bos_token_id=int(g("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(g("tokenizer.ggml.eos_token_id")),
        pad_token_id=int(g("tokenizer.ggml.padding_token_id", 0)))
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).float().eval()

    def deq(name):
        t = tensors[name]
        w = dequantize(t.data, t.tensor_type)
        # ggml ne[] is the reverse of the PyTorch shape.
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        return np.ascontiguousarray(w.reshape(shape).astype(np.float32))

    def unpermute(w, nh):
        # inverse of convert_hf_to_gguf LlamaModel.permute:
        #   w.reshape(nh, 2, d/2, in).swapaxes(1, 2).reshape(out, in)
        out, inp = w.shape
        return w.reshape(nh, out // nh // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)

    sd = {"model.embed_tokens.weight": deq("token_embd.weight"),
          "model.norm.weight": deq("output_norm.weight")}
    if not tied:
        sd["lm_head.weight"] = deq("output.weight")
    for i in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        sd[p + "input_layernorm.weight"] = deq(b + "attn_norm.weight")
        sd[p + "post_attention_layernorm.weight"] = deq(b + "ffn_norm.weight")
        sd[p + "self_attn.q_proj.weight"] = unpermute(deq(b + "attn_q.weight"), n_head)
        sd[p + "self_attn.k_proj.weight"] = unpermute(deq(b + "attn_k.weight"), n_kv)
        sd[p + "self_attn.v_proj.weight"] = deq(b + "attn_v.weight")
        sd[p + "self_attn.o_proj.weight"] = deq(b + "attn_output.weight")
        sd[p + "mlp.gate_proj.weight"] = deq(b + "ffn_gate.weight")
        sd[p + "mlp.up_proj.weight"] = deq(b + "ffn_up.weight")
        sd[p + "mlp.down_proj.weight"] = deq(b + "ffn_down.weight")
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()},
                                                strict=False)
    missing = [m for m in missing if not (tied and m == "lm_head.weight")]
    assert not missing and not unexpected, (missing, unexpected)
    if tied:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


def ref_dequant(t) -> np.ndarray:
    """Independent numpy dequantization from the block layouts in
    docs/reference/llamacpp-gguf.md (Q4_1, Q8_0, F32), used to check gguf-py."""
    from gguf import GGMLQuantizationType as Q
    raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
    if t.tensor_type == Q.F32:
        return raw.view("<f4").astype(np.float32)
    if t.tensor_type == Q.Q4_1:   # 20 B: f16 d, f16 m, qs[16]; elem j = lo nibble, j+16 = hi nibble
        b = raw.reshape(-1, 20)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        m = b[:, 2:4].copy().view("<f2").astype(np.float32)
        qs = b[:, 4:20]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)
        return (d * q + m).reshape(-1)
    if t.tensor_type == Q.Q8_0:   # 34 B: f16 d, i8 q[32]
        b = raw.reshape(-1, 34)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        q = b[:, 2:34].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)
    raise NotImplementedError(t.tensor_type.name)


def check_dequant(reader) -> float:
    from gguf.quants import dequantize
    worst = 0.0
    for t in reader.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        b = ref_dequant(t)
        assert a.shape == b.shape, t.name
        worst = max(worst, float(np.abs(a - b).max()))
    return worst


def load_transformers(gguf_path):
    from transformers import AutoModelForCausalLM
    d, f = os.path.split(os.path.abspath(gguf_path))
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                             attn_implementation="eager")
    # (transformers marks it quant_method=gguf and refuses .float(); it is already fp32)
    assert m.dtype == torch.float32
    return m.eval()


def compare_weights(a, b) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb), set(sa) ^ set(sb)
    worst = 0.0
    for k in sa:
        assert sa[k].shape == sb[k].shape, k
        worst = max(worst, float((sa[k].float() - sb[k].float()).abs().max()))
    return worst


PROMPTS = [
    ("chat", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
             "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
             "<|im_start|>assistant\n"),
    ("prose", "The old lighthouse keeper climbed the spiral stairs every evening, carrying a "
              "lantern and a thermos of tea. From the top, he could see the fishing boats "
              "returning to the harbor, their"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
             "        return n\n    a, b = 0, 1\n    for _ in range(n - 1):\n"),
    ("digits", "In 2023, the population grew from 1,234,567 to 1,250,000, an increase of 1.26%. "
               "The numbers 3.14159 and 2.71828 are famous: 12345 + 67890 ="),
    ("multilingual", "Bonjour, je m'appelle Marie et j'habite à Paris. ¿Dónde está la biblioteca? "
                     "Der schnelle braune Fuchs springt über den faulen Hund. Привет, как дела? "
                     "日本語を話せますか？ 你好，世界！"),
    ("long", None),  # filled in below: ~300 tokens
    ("single", "<|im_start|>"),
]

LONG_TEXT = (
    "The history of computing is a story of abstraction. Early machines were programmed by "
    "physically rewiring circuits, a slow and error-prone process that limited what people could "
    "build. The stored-program concept, described by John von Neumann in 1945, changed that: "
    "instructions could live in memory alongside data, so a single machine could run many different "
    "programs. Assembly languages soon replaced raw binary, giving mnemonic names to operations, and "
    "in the late 1950s high-level languages such as FORTRAN and COBOL let scientists and business "
    "analysts express algorithms in terms closer to their own problems. Each layer hid details of "
    "the one below. Operating systems abstracted the hardware, managing memory, files and devices so "
    "that applications did not have to. Networks abstracted distance, and the protocols of the "
    "internet let computers on different continents exchange messages as if they were neighbors. "
    "Databases abstracted storage, letting programmers ask for the records they wanted rather than "
    "describing how to find them. Today, machine learning adds yet another layer: instead of writing "
    "explicit rules, engineers collect examples and let an optimization procedure discover the "
    "rules. Large language models are an extreme case, trained on vast collections of text to "
    "predict the next word. They can summarize documents, translate between languages, and write "
    "code, yet the way they work internally remains only partly understood. Researchers study their "
    "activations, probe their representations, and measure how their behavior changes with scale. "
    "What will the next layer of abstraction be? Perhaps it will"
)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "logits", "smollm2_q4_1.bin"))
    ap.add_argument("--loader", choices=["auto", "transformers", "manual"], default="auto",
                    help="auto: transformers' GGUF loader if importable (needs accelerate), "
                         "else manual; both are cross-checked when available")
    args = ap.parse_args(argv)
    set_threads()
    import gguf
    t0 = time.time()
    reader = gguf.GGUFReader(args.gguf)
    tok = build_tokenizer(reader)

    dq = check_dequant(reader)
    print(f"[dequant] gguf.quants.dequantize vs independent numpy Q4_1/Q8_0/F32 decoder: "
          f"max |d| = {dq:g} over {len(reader.tensors)} tensors")
    assert dq == 0.0
    manual = load_manual(reader)
    hf = None
    if args.loader in ("auto", "transformers"):
        try:
            hf = load_transformers(args.gguf)
        except Exception as e:  # accelerate missing, unsupported quant type, ...
            if args.loader == "transformers":
                raise
            print(f"[loader] transformers GGUF path unavailable ({type(e).__name__}: {e}); "
                  f"using the manual dequantization")
    if hf is not None:
        diff = compare_weights(hf, manual)
        print(f"[loader] transformers GGUF loader vs manual gguf.quants.dequantize: "
              f"max |dw| = {diff:g}")
        assert diff == 0.0, "loaders disagree"
        loader = "transformers (AutoModelForCausalLM gguf_file=), identical to manual dequantization"
    else:
        loader = "manual (gguf.quants.dequantize + Q/K unpermute into LlamaForCausalLM)"
    model = hf if (hf is not None and args.loader != "manual") else manual
    assert model.dtype == torch.float32 and model.config._attn_implementation == "eager"
    print(f"[loader] using: {loader}; dtype={model.dtype} attn={model.config._attn_implementation}")

    # Optional cross-check of the tokenizer against transformers' own GGUF tokenizer.
    hf_tok = None
    try:
        from transformers import AutoTokenizer
        d, f = os.path.split(os.path.abspath(args.gguf))
        hf_tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    except Exception as e:
        print(f"[tokenizer] transformers GGUF tokenizer unavailable: {type(e).__name__}: {e}")

    prompts = [(n, LONG_TEXT if t is None else t) for n, t in PROMPTS]
    records = []
    for name, text in prompts:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text, name
        if hf_tok is not None:
            hids = hf_tok(text, add_special_tokens=False)["input_ids"]
            print(f"[tokenizer] {name}: {len(ids)} ids; transformers GGUF tokenizer "
                  f"{'agrees' if hids == ids else 'DIFFERS (' + str(len(hids)) + ' ids)'}")
        t1 = time.time()
        rec = compute_record(model, ids, name, text)
        rec["gen_text"] = tok.decode(rec["gen"], skip_special_tokens=False)
        records.append(rec)
        print(f"[run] {name}: {len(ids)} prompt ids, {time.time() - t1:.1f}s")

    # Sanity check: the two loaders give the same logits (weights are equal, so they must).
    if hf is not None and model is hf:
        with torch.no_grad():
            ids = torch.tensor([records[0]["ids"]])
            d = (manual(ids).logits - hf(ids).logits).abs().max().item()
        print(f"[loader] chat-prompt logits, manual vs transformers: max |d| = {d:g}")

    write_brlg(args.out, records)
    verify_roundtrip(args.out, records)
    meta = dict(model=os.path.basename(args.gguf),
                model_sha256=hashlib.sha256(open(args.gguf, "rb").read()).hexdigest(),
                loader=loader, dtype="float32", attn_implementation="eager",
                torch=torch.__version__, transformers=__import__("transformers").__version__,
                command="python scripts/reference/make_logits_fixtures.py",
                notes="prompt ids from tokenizers BPE built from the GGUF vocab/merges "
                      "(smollm pre-tokenizer); generation: greedy, exactly 64 tokens, no EOS stop")
    write_sidecar(args.out[:-4] + ".json", meta, records,
                  decode=lambda g: tok.decode(g, skip_special_tokens=False))
    summarize("SmolLM2-135M-Instruct Q4_1", args.out, records)
    for r in records:
        print(f"--- {r['name']} continuation ---\n{r['gen_text']!r}")
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
