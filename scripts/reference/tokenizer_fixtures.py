#!/usr/bin/env python3
"""Reference fixtures for engine/tokenizer (the C++ tests compare ids exactly).

Run from the repository root with the reference venv:
  /root/.venvs/ref/bin/python scripts/reference/tokenizer_fixtures.py

Writes tests/fixtures/tokenizer/:
  corpus.jsonl                 the test strings, one JSON string a line (deterministic)
  smollm2_ids.jsonl            ids of every corpus string from the SmolLM2 reference
                               tokenizer (HF `tokenizers`, built from the GGUF's vocabulary
                               and merges as docs/engineering-notes.md says)
  {llama3,qwen2,spm}/tokenizer.json, tokenizer_config.json
                               small tokenizers trained here with `tokenizers`
  {llama3,qwen2,spm}/ids.jsonl ids of the first N_SMALL corpus strings
  chat_templates.json          jinja2 renderings of the four chat templates
"""
import json
import pathlib
import random
import sys

import gguf
import jinja2
import jinja2.ext
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
GGUF_PATH = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
N_SMALL = 400

LLAMA3_REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# ---------------------------------------------------------------- corpus

WORDS = ("the of and to in is was for that with as on by at from it an be this which or are have not "
         "had but were their one all been has there can more when will would who so if out up what about "
         "into than them its only other new some could time these two may then do first any like now my "
         "over such our man me even most made after also did many before must through back years where much "
         "your way well down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know "
         "while last might us great old year off come since against go came right used take three tokenizer "
         "don't I'm you're we've they'll she'd it's O'Neil can't won't DON'T I'M THEY'RE").split()
ACCENTED = "café naïve résumé façade Ångström Øresund Düsseldorf Straße señor jalapeño crème brûlée Zürich " \
           "élève garçon œuvre Łódź Škoda Čapek Ærø İstanbul ĳssel Ελληνικά Россия український ქართული Հայերեն".split()
CJK = ["日本語のテキスト", "中文分词测试", "한국어 문장입니다", "東京都渋谷区", "汉字和かな混じり", "我爱自然语言处理",
       "カタカナ", "ひらがな", "これは、テストです。", "漢字１２３", "第二十三章"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🧑🏿‍💻", "✨", "🤖", "🐍", "👩‍🔬", "1️⃣", "☕", "🦀"]
ODD = ["e\u0301", "a\u0308\u0304", "\ufeff", "\ufffe", "\uffff", "\U0001FFFE", "\U0010FFFF", "\u200b", "\u200d",
       "\u00a0", "\u2028", "\u2029", "\u3000", "\u0085", "\U00010348", "\U0001D11E", "\u0000", "\x1f", "\x7f",
       "\u017f", "'\u017f", "\u212a", "\u0660\u0661\u0662", "\u00b2\u00b3", "\u2163", "\uff10\uff11", "\u0e51\u0e52",
       "\U000E0001", "\ud7ff", "\ue000", "\u0301", "\t", "\r\n", "\v", "\f"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "--", "—", "–", "«»", "“”", "¿¡", "§", "©", "€", "£", "¥"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); }",
    "const x = {a: 1, 'b': [2, 3]};  // comment",
    "SELECT name, COUNT(*) FROM users WHERE id > 10 GROUP BY name;",
    "if x == None:\n\tpass\nelse:\n\t\traise ValueError('bad')",
    "fn main() -> Result<(), Box<dyn Error>> {\n    Ok(())\n}",
    "<div class=\"a\">&nbsp;</div>\n<!-- x -->",
    "    indented_line = 42  \n\n\n        deeper()\r\n",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    "x_1+=y__2**3//4",
]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>", "<|im_start|>user\nhi<|im_end|>",
           "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n", "<|im_start|><|im_end|>",
           "<|im_start", "im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<s>", "</s>", "[INST]"]


def make_corpus() -> list:
    rng = random.Random(20240601)
    out = []

    def words(k):
        return " ".join(rng.choice(WORDS) for _ in range(k))

    for _ in range(400):  # ASCII prose
        s = words(rng.randint(1, 25))
        if rng.random() < 0.5:
            s = s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", ""])
        out.append(s)
    for _ in range(150):  # code
        out.append(rng.choice(CODE) if rng.random() < 0.5 else rng.choice(CODE) + words(3) + rng.choice(CODE))
    for _ in range(150):  # whitespace runs
        ws = "".join(rng.choice([" ", " ", "\t", "\n", "\r", "\u00a0", "\u3000"]) for _ in range(rng.randint(1, 40)))
        out.append(rng.choice(["", words(1)]) + ws + rng.choice(["", words(2), "1", "!"]) + (ws if rng.random() < 0.3 else ""))
    for _ in range(200):  # digits
        parts = []
        for _ in range(rng.randint(1, 6)):
            n = str(rng.randint(0, 10 ** rng.randint(1, 12)))
            parts.append(rng.choice([n, " " + n, n + ".", "$" + n, n + "%", "-" + n, n + "th", " " + n + "," + n]))
        out.append(rng.choice(["", words(2) + " "]) + "".join(parts))
    for _ in range(150):  # punctuation runs
        out.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 12))) +
                   rng.choice(["", " ", "\n", words(1), " " + words(1)]))
    for _ in range(200):  # accented Latin and other scripts
        out.append(" ".join(rng.choice(ACCENTED + WORDS[:20]) for _ in range(rng.randint(1, 10))))
    for _ in range(150):  # CJK
        out.append("".join(rng.choice(CJK + ["，", "。", " ", "abc", "123"]) for _ in range(rng.randint(1, 6))))
    for _ in range(150):  # emoji incl. ZWJ sequences
        out.append("".join(rng.choice(EMOJI + [" ", "a", "!", "\u200d"]) for _ in range(rng.randint(1, 10))))
    for _ in range(150):  # odd but valid UTF-8
        out.append("".join(rng.choice(ODD + ["a", " ", "1", "x"]) for _ in range(rng.randint(1, 10))))
    for _ in range(150):  # special-token text
        out.append("".join(rng.choice(SPECIAL + [words(2), "\n", " ", "hi"]) for _ in range(rng.randint(1, 6))))
    for _ in range(150):  # everything mixed
        pool = WORDS + ACCENTED + CJK + EMOJI + ODD + PUNCT + SPECIAL + ["  ", "\n\n", "2024", "'s", "'LL", " 'Re"]
        out.append("".join(rng.choice(pool) + rng.choice(["", " ", "", "\n"]) for _ in range(rng.randint(1, 20))))
    # Fixed edge cases.
    out += ["", " ", "  ", "\n", "a", " a", "a ", "a  b", "a \tb", "1234567", " 12 345", "'s", "'S", "'ll", "x'Ve",
            "don't", "DON'T", "\r\n\r\n", " \n \n ", "   \n", "hello\n\n\nworld", "(word", "\tword", "\u3000word",
            "a" * 300, " " * 200, "ab" * 150, "😀" * 40, "!" * 100, "1" * 50, "é" * 60, "\n" * 30, "<|im_start|>" * 5,
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"]
    return out


# ---------------------------------------------------------------- SmolLM2 reference

def read_gguf_vocab():
    r = gguf.GGUFReader(str(GGUF_PATH))
    f = r.fields

    def strings(key):
        field = f[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    tt = f["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    merges = strings("tokenizer.ggml.merges")
    template = bytes(f["tokenizer.chat_template"].parts[-1]).decode("utf-8")
    return tokens, types, merges, template


def smollm2_reference(tokens, types, merges) -> Tokenizer:
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    # use_regex=True (the default): after the digit split, the GPT-2 regex applies,
    # as in llama.cpp's smollm pre-tokenizer.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok


# ---------------------------------------------------------------- small trained tokenizers

def train_byte_level(corpus, regex, specials, vocab_size, ignore_merges, bos):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = ignore_merges
    if bos:
        j["post_processor"] = json.loads(processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]).__getstate__())
    return Tokenizer.from_str(json.dumps(j))


def train_spm(corpus, vocab_size):
    """Llama-2 style: '▁' normalizer, BPE over characters with byte fallback,
    <unk> <s> </s> then <0x00>..<0xFF> as the first ids (as in Llama 2)."""
    norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = norm
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=300, show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in old:
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["fuse_unk"] = True
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]).__getstate__())
    return Tokenizer.from_str(json.dumps(j))


LLAMA3_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' "
                   "+ message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
                   "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA2_TEMPLATE = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
                   "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
                   "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                   "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                   "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
                   "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
                   "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
                   "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
MISTRAL_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
                    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
QWEN_CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                        "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def render(template, messages, gen, bos, eos):
    # The environment transformers' apply_chat_template uses.
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=gen, bos_token=bos, eos_token=eos)


def chat_fixtures(smol_template):
    convs = [
        [{"role": "user", "content": "Hello!"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
        [{"role": "user", "content": "  Hi  there \n"}, {"role": "assistant", "content": " Hello! "},
         {"role": "user", "content": "Tell me a joke."}],
        [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Ahoy"},
         {"role": "assistant", "content": "Arr!"}, {"role": "user", "content": "Où est le trésor? 🏴‍☠️"}],
    ]
    cases = []
    fams = [("chatml", smol_template, "You are a helpful AI assistant named SmolLM, trained by Hugging Face", True),
            ("chatml", QWEN_CHATML_TEMPLATE, "", True),
            ("llama3", LLAMA3_TEMPLATE, "", True), ("llama2", LLAMA2_TEMPLATE, "", False),
            ("mistral", MISTRAL_TEMPLATE, "", False)]
    for fam, tpl, default_system, has_gen in fams:
        for msgs in convs:
            if fam == "mistral" and msgs[0]["role"] == "system":
                continue  # the v0.1 template rejects system messages
            for gen in ([False, True] if has_gen else [False]):
                bos, eos = ("<|begin_of_text|>", "<|eot_id|>") if fam == "llama3" else ("<s>", "</s>")
                cases.append({"format": fam, "template": tpl, "default_system": default_system, "messages": msgs,
                              "add_generation_prompt": gen, "expected": render(tpl, msgs, gen, bos, eos)})
    return cases


def write_ids(path, tok, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(tok.encode(t, add_special_tokens=False).ids, separators=(",", ":")) + "\n")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus()
    with open(OUT / "corpus.jsonl", "w", encoding="utf-8") as f:
        for s in corpus:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")

    tokens, types, merges, template = read_gguf_vocab()
    smol = smollm2_reference(tokens, types, merges)
    write_ids(OUT / "smollm2_ids.jsonl", smol, corpus)
    bad = [s for s in corpus if smol.decode(smol.encode(s, add_special_tokens=False).ids, skip_special_tokens=False) != s]
    print(f"smollm2: {len(corpus)} strings, {len(bad)} do not round-trip in the reference", file=sys.stderr)
    if len(sys.argv) > 1:  # optional: export the SmolLM2 reference tokenizer.json for inspection
        smol.save(sys.argv[1])

    train_text = corpus * 3
    small = {
        "llama3": (train_byte_level(train_text, LLAMA3_REGEX,
                                    ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
                                    2048, True, "<|begin_of_text|>"),
                   {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE}),
        "qwen2": (train_byte_level(train_text, QWEN2_REGEX, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 2048, False, None),
                  {"eos_token": "<|im_end|>", "add_bos_token": False, "chat_template": QWEN_CHATML_TEMPLATE}),
        "spm": (train_spm(train_text, 1500),
                {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "chat_template": LLAMA2_TEMPLATE}),
    }
    for name, (tok, config) in small.items():
        d = OUT / name
        d.mkdir(exist_ok=True)
        tok.save(str(d / "tokenizer.json"), pretty=False)
        (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
        write_ids(d / "ids.jsonl", tok, corpus[:N_SMALL])
        print(f"{name}: vocab {tok.get_vocab_size()}", file=sys.stderr)

    with open(OUT / "chat_templates.json", "w", encoding="utf-8") as f:
        json.dump(chat_fixtures(template), f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
