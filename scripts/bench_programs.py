#!/usr/bin/env python3
"""Many programs of one client through braid serve: program-level priority
(--fair: least attained service over a client's programs) against the
default order (goal class, priority, then arrival: first come, first served).

usage: bench_programs.py BRAID MODEL [--rounds 2] [--steps 16]
                         [--max-running 8] [--json PATH]

Per round and policy, a fresh server (one API key, so one client) gets, all
at once over POST /v1/programs: 8 map_reduce programs (8 summaries of a
96-token part of a document each, then one abstract; each program its own
part of bench/inputs/tree_report.txt) and one agent loop of --steps
dependent calls, each prompt the transcript so far. Printed: each program's
completion time (submission to answer), the mean and p99 (nearest rank) over
the 9 programs, the map_reduce mean and the loop's time, per policy (median
over rounds) and their ratios. Greedy decoding: both policies compute the
same calls. The server runs with 2 threads (tests/serve/serve_util.py).
"""
import argparse
import http.client
import json
import math
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_util import Server  # noqa: E402
from bench_serve_http import cpu_model  # noqa: E402  (beside this script)

KEY = "sk-bench-programs-0001"

# apps/map_reduce's prompts as a program that takes its document as text (a
# server's programs read no files) and sets no latency goal, so that every
# call of the workload is in one goal class, where the policy alone orders.
MAP_REDUCE = r'''
local summarize = braid.fn { name = "summarize", system = "You summarize text accurately and briefly.", prompt = [[
Summarize this passage in one sentence.

{{chunk}}

Summary: {{gen summary max_tokens=48 stop="\n"}}]] }
local combine = braid.fn { name = "combine", system = "You write crisp abstracts.", prompt = [[
Summaries of the parts of one document:
{{parts}}

Write one short paragraph about the whole document: {{gen abstract max_tokens=64 stop="\n\n"}}]] }
return function(doc)
  local parts = {}
  for i, chunk in ipairs(braid.chunks(doc, { tokens = 96 })) do
    parts[i] = summarize{ chunk = chunk }.summary
  end
  return combine{ parts = braid.join(parts, "\n") }.abstract:get()
end
'''

AGENT_LOOP = r'''
local step = braid.fn { name = "step", system = "You reason step by step about a question.", prompt = [[
{{transcript}}
Next step: {{gen thought max_tokens=32 stop="\n"}}]] }
return function(question, steps)
  local transcript = "Question: " .. question
  for i = 1, tonumber(steps) do
    local thought = step{ transcript = transcript }.thought:get()
    transcript = transcript .. "\nStep " .. i .. ": " .. thought
  end
  return #transcript
end
'''


def documents(n, words_each):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "inputs",
                        "tree_report.txt")
    words = open(path).read().split()
    return [" ".join(words[i * words_each:(i + 1) * words_each]) for i in range(n)]


def run_program(port, source, args, out, index):
    body = json.dumps({"source": source, "args": args})
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    conn.request("POST", "/v1/programs", body,
                 {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    resp = conn.getresponse()
    data = resp.read()
    elapsed = time.monotonic() - t0
    conn.close()
    doc = json.loads(data) if data else {}
    if resp.status != 200 or doc.get("state") != "done":
        raise RuntimeError(f"program {index}: HTTP {resp.status}: {data[:300]!r}")
    out[index] = elapsed


def one_round(braid, model, fair, opts):
    extra = ["--max-running", str(opts.max_running)]  # serve_util: -t 2, a fresh run store
    if fair:
        extra.append("--fair")
    server = Server(braid, model, extra=extra, keys={"bench": KEY}).start()
    try:
        docs = documents(8, 560)  # about 8 parts of 96 tokens each
        jobs = [(AGENT_LOOP, ["Which city grows fastest, and why?", str(opts.steps)])]
        jobs += [(MAP_REDUCE, [d]) for d in docs]
        times = [None] * len(jobs)
        errors = []

        def go(i, job):
            try:
                run_program(server.port, job[0], job[1], times, i)
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(str(e))

        threads = [threading.Thread(target=go, args=(i, j)) for i, j in enumerate(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError("; ".join(errors))
        return times
    finally:
        server.stop()


def p99(values):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("braid")
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--max-running", type=int, default=8)
    ap.add_argument("--json")
    opts = ap.parse_args()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    print(f"8 map_reduce programs + 1 agent loop of {opts.steps} steps, one client, "
          f"--max-running {opts.max_running}")
    policies = [("fcfs", False), ("fair", True)]
    results = {name: [] for name, _ in policies}
    for r in range(opts.rounds):
        for name, fair in policies:
            times = one_round(opts.braid, opts.model, fair, opts)
            results[name].append(times)
            print(f"round {r + 1} {name:5s}: loop {times[0]:.1f} s; map_reduce "
                  + " ".join(f"{t:.1f}" for t in times[1:]), flush=True)
    summary = {}
    print("\n| order | mean s | p99 s | map_reduce mean s | agent loop s |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in policies:
        rounds = results[name]
        s = {
            "mean": statistics.median(statistics.mean(t) for t in rounds),
            "p99": statistics.median(p99(t) for t in rounds),
            "map_reduce_mean": statistics.median(statistics.mean(t[1:]) for t in rounds),
            "loop": statistics.median(t[0] for t in rounds),
        }
        summary[name] = s
        label = "arrival (default)" if name == "fcfs" else "program LAS (--fair)"
        print(f"| {label} | {s['mean']:.1f} | {s['p99']:.1f} | {s['map_reduce_mean']:.1f} | "
              f"{s['loop']:.1f} |")
    f, b = summary["fair"], summary["fcfs"]
    print(f"\nfair / fcfs: mean {f['mean'] / b['mean']:.2f}, p99 {f['p99'] / b['p99']:.2f}, "
          f"map_reduce mean {f['map_reduce_mean'] / b['map_reduce_mean']:.2f}, "
          f"loop {f['loop'] / b['loop']:.2f} (< 1: faster under program-level priority)")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"cpu": cpu_model(), "steps": opts.steps, "max_running": opts.max_running,
                       "rounds": results, "summary": summary}, fh, indent=1)


if __name__ == "__main__":
    main()
