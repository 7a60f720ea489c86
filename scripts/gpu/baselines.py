#!/usr/bin/env python3
"""Batch-1 decode baselines on the same weights the engine runs.

    python scripts/gpu/baselines.py --model /tmp/braid-gpu/models/llama1b --out /tmp/braid-gpu/baselines/llama1b.json
    python scripts/gpu/baselines.py --model /tmp/ck/tiny --out /tmp/bl-tiny.json --device cpu --tiny

(a) transformers generate: prompt 128 random ids, 128 new tokens (greedy,
    fixed length, no EOS), sdpa attention, bf16; new tokens / wall time of
    the whole call, median of 3 after a warm-up.
(b) static_decoder.py compiled with torch.compile(mode="reduce-overhead",
    fullgraph=True) (static KV cache, index_copy_, CUDA graphs: the gpt-fast
    recipe): prefill of the same 128 ids (not compiled), then 256 decode
    steps of one token; 256 / decode time, median of 3 after a warm-up run
    that compiles and records the graphs. Sanity: its greedy tokens against
    (a)'s (matching prefix, of the first 128) and its prefill logits against
    transformers' (cosine).
(c) device-to-device copy of a 4 GiB random buffer (bytes read + written),
    median of 10; the weight-read roofline = bandwidth / bytes of weights one
    decode step reads (every matrix but the embedding table; the output matrix
    counted even when tied; KV-cache reads not counted).

Writes one JSON (--out) after every part and prints a summary. A later run
on the same --out does only the parts still missing (a part that failed or
was cut off by a time-out); a complete file is left alone (--force redoes
it). --skip-hf / --skip-compiled leave a part out.
"""
from __future__ import annotations

import argparse
import gc as pygc
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402
import static_decoder as sd  # noqa: E402

PROMPT_SEED = 777
PARTS = ("copy", "hf_generate", "compiled_torch")


class Timer:
    """Wall time of a region of device work (events on CUDA, clock on CPU)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            self.seconds = self.start.elapsed_time(self.end) / 1e3
        else:
            self.seconds = time.perf_counter() - self.t0


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# ---- (a) transformers generate ----------------------------------------------------

@torch.no_grad()
def hf_generate(path, device, prompt, new_tokens, runs):
    model, how = gc.load_hf_model(path, device, "sdpa")
    model.generation_config.eos_token_id = None
    x = torch.tensor([prompt], device=device)
    mask = torch.ones_like(x)

    def gen(n):
        return model.generate(x, attention_mask=mask, max_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=0)

    gen(8)  # warm-up: kernels, handles, allocator
    times, tokens = [], None
    for _ in range(runs):
        with Timer(device) as t:
            out = gen(new_tokens)
        times.append(t.seconds)
        tokens = out[0, len(prompt):].tolist()
    if len(tokens) != new_tokens:
        raise RuntimeError(f"generate returned {len(tokens)} tokens, expected {new_tokens}")
    prompt_logits = model(x).logits[0].float()
    med = statistics.median(times)
    return {"tokens_per_s": new_tokens / med, "seconds": times, "prompt": len(prompt),
            "new_tokens": new_tokens, "attn": "sdpa", "loaded_via": how,
            "note": "new tokens / wall time of generate() (prefill included)"}, tokens, prompt_logits


# ---- (b) compiled static-cache decoder ---------------------------------------------

@torch.no_grad()
def compiled_decode(path, device, prompt, steps, runs, compile_mode):
    t0 = time.time()
    cfg, weights = sd.load_checkpoint(path, device)
    model = sd.StaticDecoder(cfg, weights, max_seq=len(prompt) + steps + 1, device=device).eval()
    del weights
    t_load = time.time() - t0
    model.mark_static()

    def decode_one(tok, input_pos):
        return model(tok, input_pos)[:, -1].argmax(dim=-1, keepdim=True)  # [1, 1]

    if compile_mode and device.type == "cuda":
        torch._logging.set_logs(perf_hints=True)  # says why if CUDA graphs are skipped
    step = torch.compile(decode_one, mode=compile_mode, fullgraph=True) if compile_mode else decode_one
    x = torch.tensor([prompt], device=device)
    prefill_pos = torch.arange(len(prompt), device=device)

    def generate():
        logits = model(x, prefill_pos)
        tok = logits[:, -1].argmax(dim=-1, keepdim=True)
        out = [tok]
        pos = torch.tensor([len(prompt)], device=device)
        sync(device)
        with Timer(device) as t:
            for _ in range(steps):
                tok = step(tok, pos).clone()  # the graph's output buffer is reused
                pos += 1
                out.append(tok)
        return torch.cat(out, dim=1)[0].tolist(), t.seconds, logits[0].float()

    t1 = time.time()
    generate()  # compiles, then records the CUDA graph on a later call
    generate()
    t_compile = time.time() - t1
    times, tokens, logits = [], None, None
    for _ in range(runs):
        tokens, seconds, logits = generate()
        times.append(seconds)
    bytes_per_token = model.weight_bytes_per_token()
    try:  # did inductor fall back from CUDA graphs? (reason in the log: perf_hints)
        from torch._dynamo.utils import counters
        cudagraph_skips = int(counters["inductor"].get("cudagraph_skips", 0))
    except Exception:  # noqa: BLE001 - a private counter; absent is not an error
        cudagraph_skips = None
    med = statistics.median(times)
    return {"tokens_per_s": steps / med, "seconds": times, "prompt": len(prompt), "decode_steps": steps,
            "compile_mode": compile_mode or "none (eager)", "seconds_load": round(t_load, 2),
            "seconds_compile_and_warmup": round(t_compile, 2), "cudagraph_skips": cudagraph_skips,
            "note": "decode steps / decode time (prefill excluded)"}, tokens, logits, bytes_per_token


# ---- (c) copy bandwidth ---------------------------------------------------------------

@torch.no_grad()
def copy_bandwidth(device, n_bytes, runs):
    n = n_bytes // 2
    src = torch.empty(n, device=device, dtype=torch.bfloat16)
    for chunk in src.split(1 << 28):  # random, never zeros; chunks keep indices 32-bit
        chunk.normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(runs):
        with Timer(device) as t:
            dst.copy_(src)
        times.append(t.seconds)
    if not torch.equal(dst[:1024], src[:1024]):
        raise RuntimeError("copy check failed")
    med = statistics.median(times)
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"gb_per_s": 2 * n * 2 / med / 1e9, "buffer_bytes": 2 * n, "seconds": times,
            "note": "bytes read + written"}


def matching_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="JSON file")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="CPU test: small copy buffer, fewer steps")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--hf-new-tokens", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--copy-gib", type=float, default=4.0)
    ap.add_argument("--compile-mode", default="reduce-overhead",
                    help='torch.compile mode for (b); "none" runs it eagerly')
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-compiled", action="store_true")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    import transformers
    transformers.utils.logging.disable_progress_bar()
    model_path = os.path.abspath(args.model)
    wanted = ["copy"] + ([] if args.skip_hf else ["hf_generate"]) + ([] if args.skip_compiled else ["compiled_torch"])
    res = None
    if not args.force and os.path.exists(args.out):
        with open(args.out) as f:
            res = json.load(f)
        if res.get("model") != model_path:
            res = None
        elif all(k in res for k in wanted):
            print(f"[baselines] {args.out} has {', '.join(wanted)} for {model_path}, skipped", flush=True)
            return
        else:
            print(f"[baselines] resuming {args.out}: has {[k for k in PARTS if k in res]}", flush=True)
    if args.tiny:
        torch.set_num_threads(1)
        args.prompt, args.hf_new_tokens, args.decode_steps = 32, 16, 32
        args.copy_gib = 1 / 16
    device = gc.pick_device(args.device)
    compile_mode = None if args.compile_mode == "none" else args.compile_mode
    t0 = time.time()
    with open(os.path.join(model_path, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    prompt = gc.random_prompts(PROMPT_SEED, [args.prompt], vocab)[0]
    if res is None:
        res = {"model": model_path, "device": str(device),
               "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "transformers": transformers.__version__,
               "weight_bytes_per_token": weight_bytes_from_files(model_path)}
    res["errors"] = {}
    hf_logits = None

    def save():
        """After every part, so a time-out keeps what was measured."""
        if "copy" in res:
            roof = res["copy"]["gb_per_s"] * 1e9 / res["weight_bytes_per_token"]
            res["roofline_tokens_per_s"] = roof
            for k in ("hf_generate", "compiled_torch"):
                if k in res:
                    res[k]["roofline_share"] = res[k]["tokens_per_s"] / roof
        res["complete"] = all(k in res for k in PARTS)
        res["seconds_last_run"] = round(time.time() - t0, 1)
        gc.save_json(args.out, res)

    def part(name, fn):
        try:
            return fn()
        except Exception as e:  # record it and go on with the other parts
            traceback.print_exc()
            res["errors"][name] = f"{type(e).__name__}: {e}"
            save()
            return None
        finally:  # the part's model is garbage now: free its memory before the next part
            pygc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    if "copy" not in res:
        r = part("copy", lambda: copy_bandwidth(device, int(args.copy_gib * 2**30), 10))
        if r:
            res["copy"] = r
            print(f"[baselines] copy: {r['gb_per_s']:.0f} GB/s", flush=True)
            save()
    if "hf_generate" in wanted and "hf_generate" not in res:
        r = part("hf_generate", lambda: hf_generate(model_path, device, prompt, args.hf_new_tokens, args.runs))
        if r:
            res["hf_generate"], hf_tokens, hf_logits = r
            res["hf_generate"]["tokens"] = hf_tokens
            print(f"[baselines] HF generate: {r[0]['tokens_per_s']:.1f} tok/s", flush=True)
            save()
    if "compiled_torch" in wanted and "compiled_torch" not in res:
        r = part("compiled_torch", lambda: compiled_decode(model_path, device, prompt, args.decode_steps,
                                                           args.runs, compile_mode))
        if r:
            c, tokens, logits, nbytes = r
            if nbytes != res["weight_bytes_per_token"]:
                res["errors"]["weight_bytes"] = f"decoder counts {nbytes}, files {res['weight_bytes_per_token']}"
            hf_tokens = (res.get("hf_generate") or {}).get("tokens")
            if hf_tokens is not None:
                c["greedy_match_prefix_vs_hf"] = matching_prefix(hf_tokens, tokens)
                c["greedy_compared"] = min(len(hf_tokens), len(tokens))
                c["greedy_match_first8"] = matching_prefix(hf_tokens[:8], tokens[:8])
            if hf_logits is not None:  # only when HF ran in this process
                c["prefill_logits_cos_min_vs_hf"] = torch.nn.functional.cosine_similarity(
                    logits.double(), hf_logits.double(), dim=-1).min().item()
            res["compiled_torch"] = c
            print(f"[baselines] compiled torch: {c['tokens_per_s']:.1f} tok/s "
                  f"(compile + warm-up {c['seconds_compile_and_warmup']:.0f} s); greedy vs HF: "
                  f"{c.get('greedy_match_prefix_vs_hf', '?')}/{c.get('greedy_compared', '?')} leading tokens "
                  f"match, first 8: {c.get('greedy_match_first8', '?')}/8; prefill logits cosine min "
                  f"{c.get('prefill_logits_cos_min_vs_hf', float('nan')):.6f}", flush=True)
            save()
    save()
    print(summary_line(res), flush=True)


def weight_bytes_from_files(path):
    """The same count as StaticDecoder.weight_bytes_per_token, from the headers."""
    from safetensors import safe_open
    total, embed = 0, 0
    for f in gc.safetensors_files(path):
        with safe_open(f, "pt") as st:
            for k in st.keys():
                sl = st.get_slice(k)
                n = 1
                for d in sl.get_shape():
                    n *= d
                b = n * 2  # bf16
                if k == "model.embed_tokens.weight":
                    embed = b
                elif "rotary" not in k:
                    total += b
    with open(os.path.join(path, "config.json")) as f:
        tied = json.load(f).get("tie_word_embeddings", False)
    return total + (embed if tied else 0)


def summary_line(res):
    parts = [f"[baselines] {os.path.basename(res['model'])}: weights/token {res['weight_bytes_per_token'] / 1e9:.2f} GB"]
    if "copy" in res:
        parts.append(f"copy {res['copy']['gb_per_s']:.0f} GB/s, roofline {res['roofline_tokens_per_s']:.0f} tok/s")
    for k, name in (("hf_generate", "HF"), ("compiled_torch", "compiled torch")):
        if k in res:
            share = res[k].get("roofline_share")
            parts.append(f"{name} {res[k]['tokens_per_s']:.1f} tok/s"
                         + (f" ({100 * share:.0f}%)" if share is not None else ""))
    if res["errors"]:
        parts.append("errors: " + "; ".join(f"{k}: {v}" for k, v in res["errors"].items()))
    return ", ".join(parts)


if __name__ == "__main__":
    main()
