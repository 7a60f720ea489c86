#!/usr/bin/env python3
"""Agent serving under serving policies: programs of apps/agents/ arriving as
a Poisson process at braid serve, one fresh server per policy and load
(python3 standard library only).

usage: bench_agents.py [--braid BIN] [--model PATH] [--device cpu|cuda]
                       [--shape cpu|gpu] [--programs N] [--loads 6,12,24,48]
                       [--policies vllm,sglang,braid,...] [--seed 1]
                       [--kv-tokens N] [--tool-scale 1.0] [--max-tokens 16,32]
                       [--turns 4,8] [--context 512,2048] [--json PATH]
                       [--policy-flags NAME=FLAGS ...] [--serve-args "..."]

The workload (drawn from --seed; the same programs and arrival order for
every policy and load, arrival times scaled by the load):

- N programs arriving as a Poisson process at each offered load (programs
  per minute). Kinds, by share: react 55% (apps/agents/react.lua), coding
  20% (coding.lua; groups of --coding-group programs share one long system
  prompt), map_reduce 15%, debate 10%.
- Tool times (braid.sleep): lognormal, median 0.7 s, clipped to 0.1-5 s,
  times --tool-scale. Debate look-ups are shorter (median 0.3 s, at most 1 s).
- react and coding: --turns turns each and a final call; the observations
  (words of bench/inputs/tree_report.txt) are sized so that the final
  prompt reaches a target drawn from --context, in tokens (estimated by
  est_tokens, within a few percent of the bundled model's tokenizer, and
  scaled to the model's own tokenizer.json when the model is a directory
  and Python's tokenizers package is present; the measured contexts are
  printed against the estimate); every output is
  exactly max_tokens tokens, drawn per program from --max-tokens.
- --shape cpu (default): 12 programs, loads 6,12,24,48 per minute,
  --kv-tokens 3072, for the bundled model on 2 cores (about 2 minutes per
  policy and load). --shape gpu: 200 programs, 2-16k token contexts, 4-12
  turns, 32-128 tokens per output, loads 30,60,120, --kv-tokens 262144
  (and --ctx as the prompts need).

Policies: a name stands for extra `braid serve` flags (POLICIES below):

  vllm               --run-mode async --policy fcfs --evict lru --retain-kv off --admit plain
  sglang             --run-mode async --policy lpm --evict lru --retain-kv off --admit plain
  braid              --run-mode dag --policy plas --program-quantum 0
                     --evict next-use --retain-kv ttl --admit anti-thrash
  braid-las          braid with the default --program-quantum (256): least
                     attained service per program instead of start order
  braid-no-retain    braid with --retain-kv off
  braid-lru          braid with --evict lru
  braid-fcfs         braid with --policy fcfs
  braid-plain-admit  braid with --admit plain

--policy-flags NAME=FLAGS replaces (or adds) a policy's flags, e.g.
`--policies vllm --policy-flags vllm=` runs the server's defaults under the
name vllm (for a server without those flags). Every server also gets -m,
--device, -t, --port 0, --db none, --kv-tokens (the pool the programs' live
contexts compete for), --max-programs, --max-queued and --workers (room for
every program at once: each holds a thread while it sleeps), --lua-seconds
3600 and --serve-args.

Per policy and load, printed and written to --json:

- programs per minute: completed / (last finish - first arrival);
- program latency (submission to result): mean, p50, p99 (nearest rank);
- per-call TTFT p99: first token minus the time the call became ready (its
  node's start_ms - queued_ms, from GET /v1/runs/{id});
- KV hit rate: cached prompt tokens / prompt tokens over all calls, and the
  prompt tokens computed (prompt - cached, summed);
- failed programs (anything but state "done"), and KV preemptions
  (GET /v1/stats);
- the SLO: p99 program latency <= --slo-factor (default 2) x the latency of
  one reference program run alone on a fresh server of the same policy (the
  workload's program with the longest estimated unloaded latency), and
  zero failures; a policy's sustainable rate is the highest offered load
  that meets it.

Ratios braid/vllm and braid/sglang (programs per minute, p99 latency) are
printed per load where those policies ran.
"""
import argparse
import http.client
import json
import math
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

POLICIES = {
    "vllm": "--run-mode async --policy fcfs --evict lru --retain-kv off --admit plain",
    "sglang": "--run-mode async --policy lpm --evict lru --retain-kv off --admit plain",
    # Programs in the order they started (one service level), longest cached prefix first.
    "braid": "--run-mode dag --policy plas --program-quantum 0 --evict next-use --retain-kv ttl --admit anti-thrash",
    # Ablations: braid with one feature turned back (or changed).
    "braid-las": "--run-mode dag --policy plas --evict next-use --retain-kv ttl --admit anti-thrash",
    "braid-no-retain": "--run-mode dag --policy plas --program-quantum 0 --evict next-use --retain-kv off --admit anti-thrash",
    "braid-lru": "--run-mode dag --policy plas --program-quantum 0 --evict lru --retain-kv ttl --admit anti-thrash",
    "braid-fcfs": "--run-mode dag --policy fcfs --evict next-use --retain-kv ttl --admit anti-thrash",
    "braid-plain-admit": "--run-mode dag --policy plas --program-quantum 0 --evict next-use --retain-kv ttl --admit plain",
}

SHAPES = {
    "cpu": {"programs": 12, "loads": "6,12,24,48", "context": "512,2048", "turns": "4,8",
            "max_tokens": "16,32", "kv_tokens": 3072, "chunks": (3, 6), "chunk_tokens": (96, 256),
            "coding_group": 3, "timeout": 1800},
    "gpu": {"programs": 200, "loads": "30,60,120", "context": "2048,16384", "turns": "4,12",
            "max_tokens": "32,128", "kv_tokens": 262144, "chunks": (4, 16), "chunk_tokens": (512, 2048),
            "coding_group": 8, "timeout": 3600},
}

MIX = [("react", 0.55), ("coding", 0.20), ("map_reduce", 0.15), ("debate", 0.10)]
TOKENS_PER_WORD = 1.28  # the bundled model's tokenizer on tree_report.txt (POST /tokenize)
# The model's tokens per est_tokens token (1 for the bundled model); set by
# calibrate() from the model's tokenizer.json where one can be read.
TOKEN_SCALE = 1.0
# For picking the reference program only: rough unloaded seconds per decoded
# token and per prompt token computed.
EST_COST = {"cpu": (0.02, 0.001), "gpu": (0.01, 0.0001)}


# ---- workload -------------------------------------------------------------


class Words:
    """Consecutive words of the sample report, from a random place (wrapping)."""

    def __init__(self):
        path = os.path.join(ROOT, "bench", "inputs", "tree_report.txt")
        self.words = open(path).read().split()

    def take(self, rng, tokens):
        n = max(1, round(tokens / (TOKENS_PER_WORD * TOKEN_SCALE)))
        start = rng.randrange(len(self.words))
        out = [self.words[(start + i) % len(self.words)] for i in range(n)]
        return " ".join(out)


# A GPT-2 style pre-tokenization: words with their leading space, digits one
# by one, runs of punctuation, whitespace. Its piece count, with long words
# counted as more than one piece, is within a few percent of the bundled
# model's token count on this benchmark's texts (checked with POST /tokenize).
PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def est_tokens(text):
    n = 0
    for piece in PIECES.findall(text):
        w = piece.strip()
        n += 1 + (max(0, len(w) - 8) // 6 if w.isalpha() else 0)
    return round(n * 1.06 * TOKEN_SCALE)


def calibrate(model):
    """Sets TOKEN_SCALE from the model's tokenizer.json on this benchmark's
    texts; returns a line saying what it did."""
    global TOKEN_SCALE
    path = os.path.join(model, "tokenizer.json")
    if not os.path.isfile(path):
        return "token estimate: the bundled model's (no tokenizer.json beside the model)"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return "token estimate: the bundled model's (Python's tokenizers package is missing)"
    sample = REACT_SYSTEM + "\n" + " ".join(Words().words[:3000])
    estimate = est_tokens(sample)
    TOKEN_SCALE = len(Tokenizer.from_file(path).encode(sample, add_special_tokens=False).ids) / estimate
    return f"token estimate: x {TOKEN_SCALE:.2f}, from {path}"


def react_system():
    """react.lua's default system prompt (its SYSTEM string)."""
    text = open(os.path.join(ROOT, "apps", "agents", "react.lua")).read()
    return re.search(r"local SYSTEM = \[\[(.*?)\]\]", text, re.S).group(1)


REACT_SYSTEM = react_system()


def tool_time(rng, scale, median=0.7, sigma=1.0, hi=5.0):
    return round(min(hi, max(0.1, rng.lognormvariate(math.log(median), sigma))) * scale, 3)


def split(rng, total, parts, least):
    """`total` tokens over `parts` pieces of random shares, each >= least."""
    weights = [rng.expovariate(1.0) for _ in range(parts)]
    s = sum(weights)
    return [max(least, round(total * w / s)) for w in weights]


def kinds_for(n, rng):
    """n kinds by MIX's shares (largest remainder), in a random order."""
    exact = [(k, n * share) for k, share in MIX]
    counts = {k: int(x) for k, x in exact}
    for k, x in sorted(exact, key=lambda kx: kx[1] - int(kx[1]), reverse=True):
        if sum(counts.values()) >= n:
            break
        counts[k] += 1
    kinds = [k for k, _ in MIX for _ in range(counts[k])]
    rng.shuffle(kinds)
    return kinds


def react_program(i, rng, words, opts):
    n = rng.randint(*opts.max_tokens)
    turns = rng.randint(*opts.turns)
    target = rng.randint(*opts.context)
    question = f"Question {i}: what does the report say about " + words.take(rng, 12) + "?"
    fixed = REACT_SYSTEM + "\n\nQuestion: " + question + "\nFinal answer:"
    per_turn = n + est_tokens("\nAction:\nObservation: ")
    obs = split(rng, target - est_tokens(fixed) - turns * per_turn, turns, 8)
    spec = {"question": question, "max_tokens": n,
            "turns": [{"tool_seconds": tool_time(rng, opts.tool_scale),
                       "observation": words.take(rng, t)} for t in obs]}
    context = est_tokens(fixed) + turns * per_turn + sum(est_tokens(t["observation"])
                                                        for t in spec["turns"])
    return spec, turns + 1, [n] * (turns + 1), [t["tool_seconds"] for t in spec["turns"]], context


def coding_program(i, rng, words, opts, group_system):
    n = rng.randint(*opts.max_tokens)
    turns = rng.randint(*opts.turns)
    target = max(rng.randint(*opts.context), group_system[1] + 200)
    files = []
    for k, t in enumerate(split(rng, round(0.25 * target), rng.randint(2, 3), 16)):
        lines, left = [], t
        while left > 0:
            body = words.take(rng, min(left, 24))
            lines.append(f"def step_{k}_{len(lines)}(state):\n    # {body}\n    return state\n")
            left -= est_tokens(lines[-1])
        files.append({"path": f"src/module_{i}_{k}.py", "content": "\n".join(lines)})
    task = f"Task {i}: fix the failing test about " + words.take(rng, 10)
    fixed = "\n".join([group_system[0], ""] + [f"### {f['path']}\n{f['content']}\n" for f in files]
                      + ["Task: " + task, "Summary of the change:"])
    per_turn = n + est_tokens("\nProposed edit:\nTest output:\nFAILED tests/test_module_0.py::"
                              "test_0 - AssertionError: ")
    obs = split(rng, target - est_tokens(fixed) - turns * per_turn, turns, 8)
    spec = {"system": group_system[0], "task": task, "files": files, "max_tokens": n,
            "turns": [{"tool_seconds": tool_time(rng, opts.tool_scale),
                       "observation": f"FAILED tests/test_module_{i}.py::test_{k} - AssertionError: "
                                      + words.take(rng, t)} for k, t in enumerate(obs)]}
    context = est_tokens(fixed) + turns * (n + est_tokens("\nProposed edit:\nTest output:\n")) + \
        sum(est_tokens(t["observation"]) for t in spec["turns"])
    return spec, turns + 1, [n] * (turns + 1), [t["tool_seconds"] for t in spec["turns"]], context


def coding_system(g, rng, words, opts):
    """A group's shared system prompt: a quarter of the mean final context."""
    tokens = round(0.25 * (opts.context[0] + opts.context[1]) / 2)
    lines = [f"You are the coding assistant of team {g}. Follow these rules in every edit:"]
    left = tokens - est_tokens(lines[0])
    while left > 0:
        lines.append(f"{len(lines)}. " + words.take(rng, min(left, 30)))
        left -= est_tokens(lines[-1]) + 1
    text = "\n".join(lines)
    return text, est_tokens(text)


def map_reduce_program(i, rng, words, opts):
    n = rng.randint(*opts.max_tokens)
    chunks = [words.take(rng, rng.randint(*opts.shape["chunk_tokens"]))
              for _ in range(rng.randint(*opts.shape["chunks"]))]
    spec = {"chunks": chunks, "max_tokens": n, "reduce_max_tokens": 2 * n,
            "tool_seconds": tool_time(rng, opts.tool_scale)}
    context = max(max(est_tokens(c) for c in chunks) + 25, len(chunks) * (2 * n + 1) + 25)
    return spec, len(chunks) + 1, [n, 2 * n], [spec["tool_seconds"]], context


def debate_program(i, rng, words, opts):
    n = rng.randint(*opts.max_tokens)
    debaters, rounds = rng.randint(2, 3), rng.randint(2, 3)
    spec = {"motion": f"motion {i}: " + words.take(rng, 10), "debaters": debaters,
            "rounds": rounds, "max_tokens": n, "judge_max_tokens": n,
            "tool_seconds": tool_time(rng, opts.tool_scale, median=0.3, sigma=0.5, hi=1.0)}
    sequential = [n] * rounds + [n]  # a round's speeches run together
    return spec, debaters * rounds + 1, sequential, [spec["tool_seconds"]] * rounds, \
        40 + debaters * rounds * (n + 4)


def make_workload(opts):
    rng = random.Random(opts.seed)
    words = Words()
    kinds = kinds_for(opts.programs, rng)
    gaps = [rng.expovariate(1.0) for _ in range(opts.programs)]  # unit rate, scaled per load
    groups = {}
    coding_seen = 0
    programs = []
    for i, kind in enumerate(kinds):
        prng = random.Random(f"{opts.seed}/{i}")  # each program its own stream
        group = None
        if kind == "react":
            spec, calls, gen, tools, context = react_program(i, prng, words, opts)
        elif kind == "coding":
            group = coding_seen // opts.coding_group
            coding_seen += 1
            if group not in groups:
                groups[group] = coding_system(group, random.Random(f"{opts.seed}/group{group}"),
                                              words, opts)
            spec, calls, gen, tools, context = coding_program(i, prng, words, opts, groups[group])
        elif kind == "map_reduce":
            spec, calls, gen, tools, context = map_reduce_program(i, prng, words, opts)
        else:
            spec, calls, gen, tools, context = debate_program(i, prng, words, opts)
        arg = json.dumps(spec)
        decode_s, prefill_s = EST_COST[opts.shape_name]
        programs.append({
            "index": i, "kind": kind, "group": group, "calls": calls,
            "tool_seconds": round(sum(tools), 3), "est_final_context": context,
            "max_tokens": spec["max_tokens"], "arg_bytes": len(arg),
            "est_unloaded_s": round(sum(tools) + sum(gen) * decode_s + context * prefill_s, 2),
            "arg": arg,
        })
    return programs, gaps


def arrivals(gaps, load_per_min):
    t, out = 0.0, []
    for g in gaps:
        out.append(t)
        t += g * 60.0 / load_per_min
    return out


# ---- the server -----------------------------------------------------------


class Server:
    def __init__(self, opts, flags):
        self.tmp = tempfile.mkdtemp(prefix="braid-bench-agents-")
        self.log = os.path.join(self.tmp, "serve.log")
        slots = opts.programs + 16
        self.cmd = [opts.braid, "serve", "-m", opts.model, "--device", opts.device, "--port", "0",
                    "--db", "none", "--max-programs", str(slots), "--max-queued", str(slots),
                    "--workers", str(max(64, slots)), "--max-pending", str(max(256, slots)),
                    "--lua-seconds", "3600"]
        if opts.threads:
            self.cmd += ["-t", str(opts.threads)]
        if opts.kv_tokens:
            self.cmd += ["--kv-tokens", str(opts.kv_tokens)]
        if opts.ctx:
            self.cmd += ["--ctx", str(opts.ctx)]
        self.cmd += shlex.split(opts.serve_args) + shlex.split(flags)
        self.proc = None
        self.port = None

    def start(self, timeout=600):
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=self.logf)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("braid serve exited: " + self.tail())
            ready = re.findall(r"ready on http://[0-9.]+:(\d+)", open(self.log, errors="replace").read())
            if ready:
                self.port = int(ready[-1])
                # One short request first, so that no program pays for the
                # first forward pass's one-time costs.
                self.request("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 1},
                             timeout=timeout)
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("braid serve did not get ready: " + self.tail())

    def tail(self):
        return open(self.log, errors="replace").read()[-1500:].strip()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "logf", None):
            self.logf.close()

    def request(self, method, path, body=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body) if body is not None else None
            conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            return resp.status, resp.read(), resp.getheader("Retry-After")
        finally:
            conn.close()


# ---- running a workload ---------------------------------------------------


def run_one(server, source, arg, timeout):
    """Submits one program and waits for its answer; then reads its nodes.
    Returns (state, seconds from submission to answer, nodes, error)."""
    t0 = time.monotonic()
    while True:
        try:
            status, data, retry = server.request("POST", "/v1/programs",
                                                 {"source": source, "args": [arg]}, timeout)
        except (OSError, http.client.HTTPException) as e:
            return "error", time.monotonic() - t0, [], f"{type(e).__name__}: {e}"
        if status == 429 and time.monotonic() - t0 < timeout:  # full now: try again
            time.sleep(float(retry or 1))
            continue
        break
    elapsed = time.monotonic() - t0
    try:
        doc = json.loads(data)
    except ValueError:
        doc = {}
    state = doc.get("state", f"http {status}")
    error = doc.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    nodes = []
    if doc.get("id"):
        try:
            st, body, _ = server.request("GET", f"/v1/runs/{doc['id']}")
            if st == 200:
                nodes = json.loads(body).get("nodes", [])
        except (OSError, http.client.HTTPException, ValueError):
            pass
    return state, elapsed, nodes, error


def run_workload(server, programs, times, opts):
    """Submits programs[i] at times[i] seconds from now; returns per program
    {state, submit_s, finish_s, latency_s, nodes, error}."""
    sources = {k: open(os.path.join(ROOT, "apps", "agents", k + ".lua")).read()
               for k, _ in MIX}
    out = [None] * len(programs)
    t0 = time.monotonic()

    def go(i):
        p = programs[i]
        submit = time.monotonic() - t0
        state, latency, nodes, error = run_one(server, sources[p["kind"]], p["arg"], opts.timeout)
        context = max((n.get("prompt_tokens", 0) for n in nodes if is_call(n)), default=None)
        out[i] = {"index": p["index"], "kind": p["kind"], "state": state, "submit_s": submit,
                  "finish_s": submit + latency, "latency_s": latency, "final_context": context,
                  "est_final_context": p["est_final_context"], "nodes": nodes, "error": error}
        if state != "done":
            print(f"  program {i} ({p['kind']}): {state}: {str(error)[:300]}", flush=True)

    threads = []
    for i, at in enumerate(times):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=go, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return out


def nearest_rank(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(p / 100.0 * len(v)) - 1)]


def is_call(node):
    return node.get("prompt_tokens", 0) > 0 or node.get("generated_tokens", 0) > 0


def metrics(results, stats):
    done = [r for r in results if r["state"] == "done"]
    lat = [r["latency_s"] for r in done]
    calls = [n for r in results for n in r["nodes"] if is_call(n)]
    ttft = []
    for n in calls:
        if n.get("first_token_ms") is not None and n.get("start_ms") is not None:
            ready = n["start_ms"] - n.get("queued_ms", 0)
            ttft.append((n["first_token_ms"] - ready) / 1000.0)
    prompt = sum(n.get("prompt_tokens", 0) for n in calls)
    cached = sum(n.get("cached_tokens", 0) for n in calls)
    host = sum(n.get("host_tokens", 0) for n in calls)  # copied back from --kv-host
    first = min(r["submit_s"] for r in results)
    last = max(r["finish_s"] for r in done) if done else None
    contexts = [r["final_context"] for r in done if r["final_context"]]
    # How far the workload's token estimates are from the model's tokens.
    est_ratio = [r["final_context"] / r["est_final_context"] for r in done
                 if r["final_context"] and r["est_final_context"]]
    preemptions = None
    if stats and stats.get("samples"):
        preemptions = sum(e.get("preemptions", 0) for e in stats["samples"][-1].get("engines", []))
    return {
        "completed": len(done),
        "failed": len(results) - len(done),
        "programs_per_min": len(done) / (last - first) * 60.0 if done and last > first else None,
        "latency_mean_s": statistics.mean(lat) if lat else None,
        "latency_p50_s": nearest_rank(lat, 50),
        "latency_p99_s": nearest_rank(lat, 99),
        "ttft_p99_s": nearest_rank(ttft, 99),
        "ttft_p50_s": nearest_rank(ttft, 50),
        "calls": len(calls),
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "host_prompt_tokens": host,
        "kv_hit_rate": cached / prompt if prompt else None,
        "host_hit_rate": host / prompt if prompt else None,
        "prompt_tokens_computed": prompt - cached - host,
        "generated_tokens": sum(n.get("generated_tokens", 0) for n in calls),
        "final_context_mean": statistics.mean(contexts) if contexts else None,
        "final_context_max": max(contexts) if contexts else None,
        "final_context_vs_estimate": statistics.mean(est_ratio) if est_ratio else None,
        "preemptions": preemptions,
        "makespan_s": last - first if done else None,
    }


def run_server(opts, flags, programs, times):
    server = Server(opts, flags).start()
    try:
        results = run_workload(server, programs, times, opts)
        stats = None
        try:
            st, body, _ = server.request("GET", "/v1/stats")
            stats = json.loads(body) if st == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            pass
        return results, metrics(results, stats)
    finally:
        server.stop()


# ---- reporting ------------------------------------------------------------


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_serve_http import cpu_model as lscpu_model  # noqa: E402
    return lscpu_model()


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return ", ".join(sorted(set(out.splitlines()))) or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def print_load_table(load, rows):
    print(f"\n### offered load {load:g} programs/min\n")
    print("| policy | prog/min | latency mean s | p50 s | p99 s | TTFT p99 s | KV hit | host hit | "
          "prompt computed | preempt | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, m in rows.items():
        if "error" in m:
            print(f"| {name} | error: {m['error'][:80]} ||||||||||")
            continue
        print(f"| {name} | {fmt(m['programs_per_min'], '.2f')} | {fmt(m['latency_mean_s'])} | "
              f"{fmt(m['latency_p50_s'])} | {fmt(m['latency_p99_s'])} | {fmt(m['ttft_p99_s'], '.2f')} | "
              f"{fmt(m['kv_hit_rate'], '.3f')} | {fmt(m.get('host_hit_rate'), '.3f')} | "
              f"{m['prompt_tokens_computed']} | "
              f"{fmt(m['preemptions'], 'd')} | {m['failed']} |")
    b = rows.get("braid")
    for base in ("vllm", "sglang"):
        o = rows.get(base)
        if b and o and "error" not in b and "error" not in o:
            print(f"braid/{base}: programs/min {fmt(ratio(b['programs_per_min'], o['programs_per_min']), '.2f')}"
                  f" (> 1: more), p99 latency {fmt(ratio(b['latency_p99_s'], o['latency_p99_s']), '.2f')}"
                  f" (< 1: lower)")


def parse_range(text, cast=int):
    parts = [cast(x) for x in str(text).split(",")]
    return (parts[0], parts[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--braid", default=os.path.join(ROOT, "build", "frontend", "braid"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, ... (passed to braid serve)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="cpu")
    ap.add_argument("--programs", type=int, help="programs per run (shape default: 12 / 200)")
    ap.add_argument("--loads", help="offered loads, programs per minute (shape default)")
    ap.add_argument("--policies", default="vllm,sglang,braid",
                    help="comma-separated names of POLICIES (or of --policy-flags)")
    ap.add_argument("--policy-flags", action="append", default=[], metavar="NAME=FLAGS",
                    help="the braid serve flags of policy NAME (replaces the table's; repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kv-tokens", type=int, help="KV cache tokens per engine (0: from memory)")
    ap.add_argument("--tool-scale", type=float, default=1.0, help="multiplies every tool time")
    ap.add_argument("--max-tokens", help="tokens per output, MIN,MAX (shape default)")
    ap.add_argument("--turns", help="react and coding turns, MIN,MAX (shape default)")
    ap.add_argument("--context", help="final prompt tokens of react and coding, MIN,MAX")
    ap.add_argument("--coding-group", type=int, help="coding programs per shared system prompt")
    ap.add_argument("--slo-factor", type=float, default=2.0)
    ap.add_argument("--ctx", type=int,
                    help="braid serve --ctx (default: 0, the model's, unless the prompts need more)")
    ap.add_argument("--threads", type=int, help="braid serve -t (default: the cores, on cpu)")
    ap.add_argument("--serve-args", default="", help="more braid serve flags, for every server")
    ap.add_argument("--timeout", type=float, help="seconds a program may take")
    ap.add_argument("--reference-policy", default="",
                    help="run the unloaded reference under this policy only and hold every "
                         "policy to its SLO (default: each policy its own)")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the unloaded reference runs (no SLO)")
    ap.add_argument("--json", help="write everything here")
    opts = ap.parse_args()

    shape = SHAPES[opts.shape]
    opts.shape_name = opts.shape
    opts.shape = shape
    opts.programs = opts.programs or shape["programs"]
    opts.loads = [float(x) for x in (opts.loads or shape["loads"]).split(",")]
    opts.max_tokens = parse_range(opts.max_tokens or shape["max_tokens"])
    opts.turns = parse_range(opts.turns or shape["turns"])
    opts.context = parse_range(opts.context or shape["context"])
    opts.coding_group = opts.coding_group or shape["coding_group"]
    opts.kv_tokens = shape["kv_tokens"] if opts.kv_tokens is None else opts.kv_tokens
    opts.timeout = opts.timeout or shape["timeout"]
    if opts.threads is None and opts.device == "cpu":
        opts.threads = os.cpu_count()
    table = dict(POLICIES)
    for item in opts.policy_flags:
        name, _, flags = item.partition("=")
        table[name] = flags
    names = [p for p in opts.policies.split(",") if p]
    unknown = [p for p in names if p not in table]
    if unknown:
        ap.error(f"unknown policies {unknown}: known {sorted(table)}; add one with --policy-flags")

    calibration = calibrate(opts.model)
    programs, gaps = make_workload(opts)
    if opts.ctx is None:
        # The server's default context is the model's, at most 4096 tokens:
        # ask for more when the longest prompt (estimated, with a margin) and
        # its output need it.
        need = 1.2 * max(p["est_final_context"] for p in programs) + 2 * opts.max_tokens[1] + 64
        opts.ctx = 0 if need <= 4096 else 1024 * math.ceil(need / 1024)
    command = " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)
    print(f"command: {command}")
    print(f"cpu: {cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    gpu = gpu_name() if opts.device.startswith("cuda") else None
    if gpu:
        print(f"gpu: {gpu}")
    kinds = {k: sum(1 for p in programs if p["kind"] == k) for k, _ in MIX}
    print(f"workload (seed {opts.seed}): {len(programs)} programs "
          + ", ".join(f"{n} {k}" for k, n in kinds.items())
          + f"; {sum(p['calls'] for p in programs)} calls; tool time per program mean "
          f"{statistics.mean(p['tool_seconds'] for p in programs):.1f} s (scale {opts.tool_scale}); "
          f"estimated final contexts {min(p['est_final_context'] for p in programs)}-"
          f"{max(p['est_final_context'] for p in programs)} tokens; max_tokens "
          f"{opts.max_tokens[0]}-{opts.max_tokens[1]}; --kv-tokens {opts.kv_tokens or 'from memory'}")
    print(calibration)
    for name in names:
        print(f"policy {name}: {table[name] or '(server defaults)'}")

    report = {"command": command, "cpu": cpu_model(), "cores": os.cpu_count(), "gpu": gpu,
              "device": opts.device, "model": opts.model, "shape": opts.shape_name,
              "seed": opts.seed, "programs": opts.programs, "loads": opts.loads,
              "kv_tokens": opts.kv_tokens, "tool_scale": opts.tool_scale,
              "max_tokens": opts.max_tokens, "turns": opts.turns, "context": opts.context,
              "token_scale": TOKEN_SCALE, "policies": {n: table[n] for n in names}, "slo_factor": opts.slo_factor,
              "workload": [{k: v for k, v in p.items() if k != "arg"} for p in programs],
              "reference": {}, "runs": [], "sustainable": {}}
    ref = max(programs, key=lambda p: p["est_unloaded_s"])
    report["reference_program"] = ref["index"]
    slo = {}
    if not opts.no_reference:
        print(f"\nSLO: p99 program latency <= {opts.slo_factor:g} x the latency of program "
              f"{ref['index']} ({ref['kind']}, {ref['calls']} calls, {ref['tool_seconds']} s of "
              f"tools) run alone on a fresh server of the policy; no failures")
        for name in ([opts.reference_policy] if opts.reference_policy else names):
            try:
                results, m = run_server(opts, table[name], [ref], [0.0])
            except RuntimeError as e:
                print(f"reference {name}: {e}")
                report["reference"][name] = {"error": str(e)}
                continue
            r = results[0]
            report["reference"][name] = {"state": r["state"], "latency_s": r["latency_s"],
                                         "metrics": m}
            if r["state"] == "done":
                slo[name] = opts.slo_factor * r["latency_s"]
                print(f"reference {name}: {r['latency_s']:.1f} s alone -> SLO p99 <= "
                      f"{slo[name]:.1f} s", flush=True)
            else:
                print(f"reference {name}: {r['state']}: {r['error']}", flush=True)
        if opts.reference_policy in slo:  # one SLO for every policy
            slo = {name: slo[opts.reference_policy] for name in names}

    for load in opts.loads:
        times = arrivals(gaps, load)
        rows = {}
        for name in names:
            print(f"\nrunning {name} at {load:g} programs/min "
                  f"({len(programs)} arrivals over {times[-1]:.0f} s)", flush=True)
            try:
                results, m = run_server(opts, table[name], programs, times)
            except RuntimeError as e:
                print(f"  {name}: {e}")
                rows[name] = {"error": str(e).splitlines()[0] if str(e) else "error"}
                report["runs"].append({"policy": name, "load": load, "error": str(e)})
                continue
            m["meets_slo"] = (name in slo and m["failed"] == 0 and m["latency_p99_s"] is not None
                              and m["latency_p99_s"] <= slo[name])
            rows[name] = m
            print(f"  {name}: {m['completed']}/{len(programs)} done, "
                  f"{fmt(m['programs_per_min'], '.2f')} programs/min, p99 "
                  f"{fmt(m['latency_p99_s'])} s, KV hit {fmt(m['kv_hit_rate'], '.3f')}, "
                  f"final contexts mean {fmt(m['final_context_mean'], '.0f')} max "
                  f"{fmt(m['final_context_max'], 'd')} tokens "
                  f"({fmt(m['final_context_vs_estimate'], '.2f')} x the estimate)", flush=True)
            report["runs"].append({
                "policy": name, "load": load, "metrics": m,
                "programs": [{k: v for k, v in r.items() if k != "nodes"} | {
                    "calls": [{k: n.get(k) for k in ("label", "prompt_tokens", "cached_tokens",
                                                      "generated_tokens", "queued_ms", "start_ms",
                                                      "first_token_ms", "end_ms")}
                              for n in r["nodes"] if is_call(n)]} for r in results]})
        print_load_table(load, rows)

    if slo:
        print("\n### sustainable rate (highest offered load meeting the SLO)\n")
        for name in names:
            ok = [r["load"] for r in report["runs"]
                  if r["policy"] == name and r.get("metrics", {}).get("meets_slo")]
            best = max(ok) if ok else None
            report["sustainable"][name] = best
            limit = f"p99 <= {slo[name]:.1f} s" if name in slo else "no reference"
            print(f"{name}: " + (f"{best:g} programs/min" if best else "none of the loads")
                  + f" ({limit})")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(report, fh, indent=1)
        print(f"\nwrote {opts.json}")


if __name__ == "__main__":
    main()
