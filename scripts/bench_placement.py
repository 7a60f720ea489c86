#!/usr/bin/env python3
"""Placement across several engines under a shared-system-prompt load.

usage: bench_placement.py BRAID MODEL [--device D] [--engines N] [--tp N]
           [--apps 4] [--system-tokens 2000] [--gen 32] [--rates 1,2,4,8]
           [--duration 30] [--placements affinity,round-robin]
           [--kv-tokens N] [--ctx N] [--slo-ms-per-token 100] [--json PATH]

`apps` applications each have their own long system prompt; requests pick an
application at random and add a short question of their own (Poisson
arrivals at each rate, /v1/completions, greedy, ignore_eos, `gen` tokens).
For each placement policy one `braid serve` is started with the engines
asked for (--device cuda:all gives one per GPU; --engines N several on one
device) and every rate is offered for `duration` seconds. Per rate:
completed requests/s, latency per output token (p50, p90: Parrot's
normalized latency), and the share of prompt tokens found cached. The
sustainable rate of a policy is the highest offered rate whose p90 latency
per output token is within the SLO and whose requests all completed.
Prints a table, the CPU model and the GPUs, and the ratio of the policies'
sustainable rates (the first policy over each other).
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve_http import cpu_model  # noqa: E402


def gpus():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
        return [l.strip() for l in out.splitlines() if l.strip()]
    except (OSError, subprocess.TimeoutExpired):
        return []


WORDS = ("river stone market ledger signal harbor orbit canvas meadow lantern copper "
         "violet summit thread engine garden mirror anchor pilot forest").split()


def system_prompt(app, n_words):
    rng = random.Random(1000 + app)
    body = " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(n_words))
    return f"You are assistant {app}. Policy {app}: {body}\n"


class Server:
    def __init__(self, braid, model, args, placement):
        self.tmp = tempfile.mkdtemp(prefix="braid-placement-")
        self.log = os.path.join(self.tmp, "serve.log")
        cmd = [braid, "serve", "-m", model, "--port", "0", "--db", "none",
               "--device", args.device, "--placement", placement, "--max-waiting", "100000"]
        if args.engines > 1:
            cmd += ["--engines", str(args.engines)]
        if args.tp > 1:
            cmd += ["--tp", str(args.tp)]
        if args.kv_tokens:
            cmd += ["--kv-tokens", str(args.kv_tokens)]
        if args.ctx:
            cmd += ["--ctx", str(args.ctx)]
        if args.threads:
            cmd += ["-t", str(args.threads)]
        self.cmd = cmd
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=self.logf)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("braid serve exited: " + open(self.log).read()[-3000:])
            m = re.findall(r"ready on http://[0-9.]+:(\d+)", open(self.log, errors="replace").read())
            if m:
                self.port = int(m[-1])
                return
            time.sleep(0.2)
        raise RuntimeError("braid serve did not get ready")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.logf.close()


def complete(port, prompt, gen, timeout):
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            j = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {e.read()[:300]!r}") from None
    u = j["usage"]
    return (time.time() - t0, u["completion_tokens"], u["prompt_tokens"],
            u.get("prompt_tokens_details", {}).get("cached_tokens", 0))


def offer(port, prompts, rate, args, seed):
    rng = random.Random(seed)
    results, errors = [], []
    lock = threading.Lock()
    timeout = args.duration * 4 + 120

    def one(i, app):
        prompt = prompts[app] + f"Question {seed}-{i}: what does policy {app} say about item {i}?"
        try:
            r = complete(port, prompt, args.gen, timeout)
            with lock:
                results.append(r)
        except Exception as e:  # noqa: BLE001 - every failure is counted
            with lock:
                errors.append(str(e))

    t_start = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=512) as pool:
        at, i = 0.0, 0
        while at < args.duration:
            delay = t_start + at - time.time()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, i, rng.randrange(args.apps))
            i += 1
            at += rng.expovariate(rate)
    wall = time.time() - t_start
    per_token = sorted(1e3 * r[0] / max(1, r[1]) for r in results)
    prompt_tokens = sum(r[2] for r in results)
    q = lambda p: per_token[min(len(per_token) - 1, int(p * len(per_token)))] if per_token else None
    return {"rate": rate, "offered": i, "completed": len(results), "errors": len(errors),
            "error_sample": errors[:3], "throughput_rps": len(results) / wall,
            "ms_per_token_p50": q(0.5), "ms_per_token_p90": q(0.9),
            "cached_share": sum(r[3] for r in results) / prompt_tokens if prompt_tokens else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("braid")
    ap.add_argument("model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ctx", type=int, default=0)
    ap.add_argument("--apps", type=int, default=4)
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--rates", default="1,2,4,8")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--placements", default="affinity,round-robin")
    ap.add_argument("--kv-tokens", type=int, default=0)
    ap.add_argument("--slo-ms-per-token", type=float, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.device.startswith("cuda:all") or "," in args.device:
        args.engines = 1  # one engine per GPU (or per --tp group)
    # Roughly one token per word and number piece.
    prompts = [system_prompt(a, args.system_tokens // 3) for a in range(args.apps)]
    rates = [float(r) for r in args.rates.split(",")]
    out = {"cpu": cpu_model(), "gpus": gpus(), "device": args.device, "engines": args.engines,
           "tp": args.tp, "apps": args.apps, "system_tokens": args.system_tokens,
           "gen": args.gen, "duration_s": args.duration, "kv_tokens": args.kv_tokens,
           "slo_ms_per_token": args.slo_ms_per_token, "policies": {}}
    print(f"CPU: {out['cpu']}; GPUs: {', '.join(out['gpus']) or 'none'}")
    for policy in args.placements.split(","):
        server = Server(args.braid, args.model, args, policy)
        rows = []
        try:
            # Warm: each app's prompt once, one at a time (placement decides where).
            for a in range(args.apps):
                complete(server.port, prompts[a] + "Warm up.", 1, 600)
            for k, rate in enumerate(rates):
                row = offer(server.port, prompts, rate, args, seed=k)
                rows.append(row)
                print(f"{policy:12s} rate {rate:6.2f}/s: {row['completed']}/{row['offered']} done, "
                      f"{row['throughput_rps']:.2f} req/s, ms/token p50 {row['ms_per_token_p50']}, "
                      f"p90 {row['ms_per_token_p90']}, cached {100 * row['cached_share']:.0f}%, "
                      f"errors {row['errors']}", flush=True)
        finally:
            server.stop()
        ok = [r["rate"] for r in rows if r["errors"] == 0 and r["completed"] == r["offered"]
              and r["ms_per_token_p90"] is not None
              and r["ms_per_token_p90"] <= args.slo_ms_per_token]
        out["policies"][policy] = {"rows": rows, "sustainable_rate": max(ok) if ok else 0}
        print(f"{policy}: sustainable rate {out['policies'][policy]['sustainable_rate']}/s")
    names = list(out["policies"])
    for other in names[1:]:
        a = out["policies"][names[0]]["sustainable_rate"]
        b = out["policies"][other]["sustainable_rate"]
        ratio = a / b if b else float("inf") if a else 0
        out[f"ratio_{names[0]}_over_{other}"] = ratio
        print(f"sustainable rate {names[0]} / {other}: {ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
