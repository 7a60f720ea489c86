"""braid serve through the official `openai` Python package: completions and
chat, whole and streamed, with logprobs, n, seed, stop, usage with cached
tokens, a JSON-schema response_format, and errors in OpenAI's shape.

Usage: openai_test.py BRAID MODEL   (run with the venv that has `openai`)"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server  # noqa: E402

import openai  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
KEY = "openai-test-key-123"
c = Checks()
srv = Server(braid, model, keys={"sdk": KEY}).start()
try:
    client = openai.OpenAI(base_url=srv.url("/v1"), api_key=KEY, max_retries=0)
    name = client.models.list().data[0].id
    c.check(bool(name), "models.list")

    # Completions, greedy: whole == streamed.
    prompt = "The three primary colors are"
    whole = client.completions.create(model=name, prompt=prompt, max_tokens=16, temperature=0)
    text = whole.choices[0].text
    c.check(len(text) > 0 and whole.choices[0].finish_reason in ("stop", "length"), "completion")
    c.check(whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens > 0, "usage")
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=name, prompt=prompt, max_tokens=16, temperature=0, stream=True) if ch.choices)
    c.check(streamed == text, f"stream == whole: {streamed!r} vs {text!r}")

    # Logprobs, n with a seed, stop.
    lp = client.completions.create(model=name, prompt=prompt, max_tokens=5, temperature=0,
                                   logprobs=3)
    lps = lp.choices[0].logprobs
    c.check(len(lps.tokens) == len(lps.token_logprobs) == len(lps.top_logprobs) > 0,
            "completion logprobs")
    c.check(all(len(t) == 3 for t in lps.top_logprobs), "top 3 per token")
    many = client.completions.create(model=name, prompt="Name an animal:", max_tokens=8,
                                     temperature=1.0, n=3, seed=11)
    c.check(len(many.choices) == 3 and sorted(ch.index for ch in many.choices) == [0, 1, 2], "n=3")
    again = client.completions.create(model=name, prompt="Name an animal:", max_tokens=8,
                                      temperature=1.0, n=3, seed=11)
    c.check([ch.text for ch in many.choices] == [ch.text for ch in again.choices],
            "same seed, same samples")
    stopped = client.completions.create(model=name, prompt="1, 2, 3, 4,", max_tokens=20,
                                        temperature=0, stop=[","])
    c.check("," not in stopped.choices[0].text, f"stop: {stopped.choices[0].text!r}")

    # Cached prompt tokens on a repeated long prompt.
    long_prompt = "Here is a long shared context about lighthouses. " * 20 + "Summary:"
    client.completions.create(model=name, prompt=long_prompt, max_tokens=2, temperature=0)
    rep = client.completions.create(model=name, prompt=long_prompt, max_tokens=2, temperature=0)
    cached = rep.usage.prompt_tokens_details.cached_tokens if rep.usage.prompt_tokens_details else 0
    c.check(cached and cached > 100, f"cached_tokens on repeat: {cached}")

    # Chat, whole and streamed, with logprobs.
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is the capital of France?"}]
    chat = client.chat.completions.create(model=name, messages=msgs, max_tokens=16, temperature=0,
                                          logprobs=True, top_logprobs=2)
    c.check(chat.choices[0].message.role == "assistant" and chat.choices[0].message.content, "chat")
    content_lp = chat.choices[0].logprobs.content
    c.check(len(content_lp) > 0 and len(content_lp[0].top_logprobs) == 2, "chat logprobs")
    parts = []
    for ch in client.chat.completions.create(model=name, messages=msgs, max_tokens=16,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        if ch.choices and ch.choices[0].delta.content:
            parts.append(ch.choices[0].delta.content)
        last = ch
    c.check("".join(parts) == chat.choices[0].message.content, "chat stream == whole")
    c.check(last.usage is not None and last.usage.completion_tokens > 0, "stream usage chunk")

    # response_format with a JSON schema: the output parses and has the keys.
    schema = {"type": "object",
              "properties": {"city": {"type": "string", "maxLength": 20},
                             "population_millions": {"type": "number"},
                             "capital": {"type": "boolean"}},
              "required": ["city", "population_millions", "capital"]}
    js = client.chat.completions.create(
        model=name, max_tokens=60, temperature=0,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "city", "schema": schema, "strict": True}})
    try:
        obj = json.loads(js.choices[0].message.content)
        ok = set(obj) == {"city", "population_millions", "capital"} and \
            isinstance(obj["capital"], bool) and isinstance(obj["city"], str)
    except ValueError:
        ok = False
    c.check(ok, f"json_schema output: {js.choices[0].message.content!r}")

    # Errors come back as openai exceptions with OpenAI's shape.
    try:
        client.completions.create(model=name, prompt="word " * 60, max_tokens=4090)
        c.check(False, "prompt + max_tokens beyond the context must fail")
    except openai.BadRequestError as e:
        c.check("4090" in str(e) and "context" in str(e), f"context error names both: {e}")
    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        c.check(False, "unknown model must fail")
    except openai.NotFoundError:
        c.check(True, "")
    try:
        client.chat.completions.create(model=name, messages=[], max_tokens=1)
        c.check(False, "empty messages must fail")
    except openai.BadRequestError:
        c.check(True, "")
    bad = openai.OpenAI(base_url=srv.url("/v1"), api_key="not-the-key", max_retries=0)
    try:
        bad.models.list()
        c.check(False, "a wrong key must fail")
    except openai.AuthenticationError:
        c.check(True, "")
finally:
    srv.stop()
    if c.failed:
        print(open(srv.log, errors="replace").read()[-1500:])
c.done("openai_test")
