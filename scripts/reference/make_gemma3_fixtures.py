#!/usr/bin/env python3
"""Reference greedy continuations for Gemma 3 270M (the Q4_K_M GGUF that
`scripts/fetch_model.sh gemma3` fetches).

Run (from the repository root, on a development machine, never in CI):

    /root/.venvs/ref/bin/python scripts/reference/make_gemma3_fixtures.py

Writes tests/fixtures/logits/gemma3_270m.json. The GGUF is dequantized to
float32 by transformers' GGUF loader (`from_pretrained(..., gguf_file=...)`)
and run by Gemma3ForCausalLM in float32 with eager attention (sliding-window
layers masked as transformers does). Prompts are tokenized by transformers'
tokenizer built from the same GGUF, with BOS, and fed as ids.

Per prompt the fixture holds the prompt ids, the top 20 logits at its last
position, and the greedy continuation of 32 tokens (no EOS stop) with the
top-1 minus top-2 gap at each step. Two prompts are longer than the 512-token
window, so the sliding layers' masks matter in them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
from make_logits_fixtures import compute_record  # noqa: E402

N_GEN = 32
TOPK = 20

CHAT = "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"

PROMPTS = [
    ("capital", "The capital of France is"),
    ("chat_capital", CHAT.format("What is the capital of France?")),
    ("chat_poem", CHAT.format("Write a haiku about the sea.")),
    ("story", "Once upon a time, in a small village by the mountains, there lived"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("json", '{"name": "Ada Lovelace", "born": 1815, "known_for": ['),
    ("digits", "The first twenty primes are 2, 3, 5, 7, 11, 13,"),
    ("french", "La tour Eiffel est un monument situé à Paris. Elle a été construite"),
    ("german", "Die Hauptstadt von Deutschland ist Berlin. Die Stadt hat"),
    ("japanese", "日本の首都は東京です。東京は"),
    ("chinese", "中国的首都是北京。北京是"),
    ("russian", "Москва — столица России. Это город"),
    ("list", "Shopping list:\n- apples\n- bread\n-"),
    ("math", "Question: What is 17 times 23?\nAnswer:"),
    ("chat_explain", CHAT.format("Explain photosynthesis in one sentence.")),
    ("dialogue", "A: Hello, how are you today?\nB:"),
    ("emoji", "My favourite emojis are 😀, 🎉 and"),
    ("whitespace", "Columns:\tname\tage\n\tAlice\t30\n\tBob\t"),
]


def long_prompt(n_sentences: int) -> str:
    rng = np.random.default_rng(7 + n_sentences)
    subjects = ["The river", "A scientist", "The old library", "Our team", "The city council",
                "A small robot", "The orchestra", "Every student", "The market", "A traveller"]
    verbs = ["remembered", "described", "measured", "questioned", "celebrated", "repaired",
             "explored", "announced", "painted", "counted"]
    objects = ["the northern bridge", "a forgotten map", "seven blue lanterns", "the winter storm",
               "an unusual melody", "the morning train", "a field of sunflowers",
               "the last chapter", "a quiet harbour", "the tallest tower"]
    words = []
    for _ in range(n_sentences):
        words.append(f"{subjects[rng.integers(10)]} {verbs[rng.integers(10)]} "
                     f"{objects[rng.integers(10)]}.")
    return " ".join(words) + " In summary,"


PROMPTS.append(("long_600", long_prompt(85)))
PROMPTS.append(("long_1100", long_prompt(160)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "logits",
                                                  "gemma3_270m.json"))
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import transformers

    torch.manual_seed(0)
    d, name = os.path.split(args.gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    assert model.config.sliding_window == 512, model.config.sliding_window
    records = []
    with torch.no_grad():
        for pname, text in PROMPTS:
            ids = tok(text).input_ids
            assert ids[0] == 2, "BOS first"
            assert tok.decode(ids[1:]) == text, f"{pname}: ids do not decode to the text"
            r = compute_record(model, ids, pname, text, k=TOPK, n_gen=N_GEN)
            e = dict(name=pname, text=text, ids=r["ids"],
                     last_top_ids=r["top_ids"][-1].tolist(),
                     last_top_logits=[float(x) for x in r["top_logits"][-1]],
                     gen_ids=r["gen"], gen_gaps=[float(x) for x in r["gen_gaps"]],
                     gen_text=tok.decode(r["gen"]))
            records.append(e)
            print(f"{pname}: {len(ids)} ids, min gen gap {min(e['gen_gaps']):.4g}: "
                  f"{e['gen_text']!r}", flush=True)
    sha = hashlib.sha256(open(args.gguf, "rb").read()).hexdigest()
    meta = dict(model=os.path.basename(args.gguf), model_sha256=sha,
                loader="transformers gguf_file, float32, eager attention",
                versions=dict(torch=torch.__version__, transformers=transformers.__version__),
                command="scripts/reference/make_gemma3_fixtures.py", n_gen=N_GEN, k=TOPK)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(meta=meta, prompts=records), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
