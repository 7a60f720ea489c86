#!/usr/bin/env python3
"""A SentencePiece BPE tokenizer (Llama 2 style: scores as merge priorities,
byte fallback) trained with `sentencepiece`, stored as a tensor-less GGUF the way
llama.cpp's converter writes tokenizer.ggml.* keys, plus sentencepiece's ids for
the first N corpus strings. Tests Tokenizer::FromGguf's "llama" path.

Run after tokenizer_fixtures.py (it reads corpus.jsonl), from the repo root:
  /root/.venvs/ref/bin/python scripts/reference/tokenizer_spm_gguf.py
Writes tests/fixtures/tokenizer/spm_gguf/{tokenizer.gguf,ids.jsonl}.
"""
import io
import json
import pathlib

import gguf
import sentencepiece as spm

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "tokenizer"
N = 400

# sentencepiece piece types -> llama.cpp token types (same numbering as gguf.TokenType).
TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}


def main():
    corpus = [json.loads(line) for line in open(FIX / "corpus.jsonl", encoding="utf-8")]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([s for s in corpus * 2 if s and "\0" not in s]), model_writer=model,
        vocab_size=1200, model_type="bpe", byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, character_coverage=0.995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, max_sentencepiece_length=16, num_threads=1,
        minloglevel=2, seed_sentencepiece_size=100000)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())

    out = FIX / "spm_gguf"
    out.mkdir(exist_ok=True)
    w = gguf.GGUFWriter(str(out / "tokenizer.gguf"), "llama")
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        t = "normal"
        if sp.is_unknown(i): t = "unknown"
        elif sp.is_control(i): t = "control"
        elif sp.is_byte(i): t = "byte"
        elif sp.is_unused(i): t = "unused"
        types.append(TYPES[t])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(out / "ids.jsonl", "w", encoding="utf-8") as f:
        for s in corpus[:N]:
            f.write(json.dumps(sp.encode(s), separators=(",", ":")) + "\n")
    print(f"spm_gguf: vocab {sp.get_piece_size()}, {N} strings")


if __name__ == "__main__":
    main()
