#!/usr/bin/env python3
"""braid serve under load, over HTTP (python3 standard library only).

usage: bench_serve_http.py BRAID MODEL [--quick] [--json PATH] [--threads N]

Three parts, each printing what it measured and the limit it is held to:

1. Below capacity: 64 streaming clients loop on /v1/completions (a short
   distinct prompt, max_tokens 32, temperature 0) for 60 s (--quick: 10 s).
   TTFT and inter-token gaps come from the arrival times of the SSE chunks.
   Limit: zero errors (a non-200, a broken stream, a missing [DONE]).
2. Above the queue caps: a server with 4 handler threads, 4 pending requests,
   8 running and 8 waiting sequences gets a burst of 200 requests at once
   (half streamed); then one with spare handler threads and the same engine
   caps gets 200 streamed requests. Limits: every request answered within
   its 60 s client timeout (0 timeouts), the 429s answered fast (p99 < 1 s)
   with Retry-After, /health answered 200 during the burst, and once the
   engine is idle no KV block held by a request (free + cached == total).
3. Server overhead: generated tokens/s of 16 concurrent streams through HTTP
   against `braid bench --serve -c 16` (same prompt length, gen length and
   threads), in interleaved rounds; the median ratio against the limit
   "within 5%" (>= 0.95).

The exit code is 0 only when the correctness limits of parts 1 and 2 hold
(zero errors, zero timeouts, no leaked blocks, fast 429s, /health up); the throughput
ratio of part 3 is reported, not enforced (it depends on the host's load).
"""
import argparse
import http.client
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_util import Server  # noqa: E402

CLIENT_TIMEOUT_S = 60.0  # part 2: every answer within this, or it counts as hung
# Part 1: a slow answer below capacity is not an error, a hung one is; on a
# shared 2-core host 64 streams of 32 tokens can take over a minute each.
LOAD_TIMEOUT_S = 300.0


def cpu_model():
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pct(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    idx = p / 100.0 * (len(v) - 1)
    lo, hi = int(idx), min(int(idx) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (idx - lo)


# ---- one request ------------------------------------------------------------


class Result:
    """What one request saw: status, timings (seconds, from its send) and errors."""

    def __init__(self):
        self.status = 0
        self.error = None  # a string: what went wrong
        self.timeout = False
        self.header_s = None  # the status line arrived
        self.ttft_s = None  # the first chunk with text
        self.gaps_s = []  # between consecutive text chunks
        self.chunk_times = []  # absolute (time.monotonic) arrival of each text chunk
        self.done_s = None
        self.completion_tokens = 0
        self.retry_after = None
        self.sent_at = 0.0


def post(port, body, stream, timeout=CLIENT_TIMEOUT_S):
    """POSTs /v1/completions and reads the whole answer; never raises."""
    r = Result()
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode()
    try:
        r.sent_at = time.monotonic()
        conn.request("POST", "/v1/completions", body=data,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        r.header_s = time.monotonic() - r.sent_at
        r.status = resp.status
        r.retry_after = resp.getheader("Retry-After")
        if resp.status != 200:
            resp.read()
            r.done_s = time.monotonic() - r.sent_at
            r.error = f"HTTP {resp.status}"
            return r
        if not stream:
            out = json.loads(resp.read())
            r.done_s = time.monotonic() - r.sent_at
            r.completion_tokens = out["usage"]["completion_tokens"]
            return r
        buf = b""
        got_done = False
        last = None
        while not got_done:
            if time.monotonic() > deadline:
                raise socket.timeout("client deadline")
            piece = resp.read1(65536)
            now = time.monotonic()
            if not piece:
                break
            buf += piece
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                data_lines = [l[6:] for l in event.split(b"\n") if l.startswith(b"data: ")]
                if not data_lines:
                    continue
                payload = b"\n".join(data_lines)
                if payload == b"[DONE]":
                    got_done = True
                    break
                obj = json.loads(payload)
                if "error" in obj:
                    r.error = "error event: " + obj["error"].get("message", "")
                    continue
                if obj.get("usage"):
                    r.completion_tokens = obj["usage"]["completion_tokens"]
                for ch in obj.get("choices", []):
                    if ch.get("text"):
                        if last is None:
                            r.ttft_s = now - r.sent_at
                        else:
                            r.gaps_s.append(now - last)
                        last = now
                        r.chunk_times.append(now)
        r.done_s = time.monotonic() - r.sent_at
        if not got_done and r.error is None:
            r.error = "stream ended without [DONE]"
    except (socket.timeout, TimeoutError):
        r.timeout = True
        r.error = "client timeout"
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        r.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return r


def metrics(port):
    """{name: {labels: value}} of the Prometheus text at /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^braid:(\w+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out.setdefault(m.group(1), {})[m.group(2) or ""] = float(m.group(3))
    return out


def total(m, name):
    return sum(m.get(name, {}).values())


def proc_cpu_s(pid):
    """User + system CPU seconds of a process (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def thread_cpu_s(pid):
    """{thread id: CPU seconds} of a process's threads."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def self_cpu_s():
    t = os.times()
    return t.user + t.system


# ---- part 1: below capacity --------------------------------------------------


def part_load(args, common):
    seconds = 10 if args.quick else 60
    clients = 64
    server = Server(args.braid, args.model, extra=common).start()
    try:
        results = []
        lock = threading.Lock()
        stop_at = time.monotonic() + seconds

        def client(i):
            k = 0
            while time.monotonic() < stop_at:
                body = {"prompt": f"Client {i}, request {k}: name a colour and a fruit.",
                        "max_tokens": 32, "temperature": 0, "stream": True,
                        "stream_options": {"include_usage": True}}
                r = post(server.port, body, stream=True, timeout=LOAD_TIMEOUT_S)
                with lock:
                    results.append(r)
                k += 1

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        ok = [r for r in results if r.error is None]
        errors = [r for r in results if r.error is not None]
        ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
        itl = [g for r in ok for g in r.gaps_s]
        tokens = sum(r.completion_tokens for r in ok)
        out = {
            "clients": clients, "seconds": seconds, "wall_s": round(wall, 2),
            "requests": len(results), "errors": len(errors),
            "error_kinds": sorted({r.error for r in errors}),
            "ttft_p50_ms": round(1e3 * pct(ttft, 50), 1), "ttft_p99_ms": round(1e3 * pct(ttft, 99), 1),
            "itl_p50_ms": round(1e3 * pct(itl, 50), 2), "itl_p99_ms": round(1e3 * pct(itl, 99), 2),
            "completion_tokens": tokens, "tok_s": round(tokens / wall, 1),
        }
        print(f"\n== 1. below capacity: {clients} streaming clients for {seconds} s "
              "(max_tokens 32, temperature 0)")
        print(f"requests {out['requests']} in {out['wall_s']} s, errors {out['errors']} "
              f"(limit: 0){' ' + str(out['error_kinds']) if errors else ''}")
        print(f"TTFT p50 {out['ttft_p50_ms']} ms, p99 {out['ttft_p99_ms']} ms; "
              f"ITL p50 {out['itl_p50_ms']} ms, p99 {out['itl_p99_ms']} ms; "
              f"{out['tok_s']} generated tok/s")
        out["pass"] = len(errors) == 0 and len(results) > 0
        return out
    finally:
        server.stop()


# ---- part 2: above the queue caps --------------------------------------------


BURSTS = [
    # The handler queue: 4 threads, 4 pending; the non-streamed requests hold
    # a thread until they finish, so most of the burst finds the queue full.
    ("handler queue", ["--workers", "4", "--max-pending", "4", "--max-running", "8",
                       "--max-waiting", "8"], "half"),
    # The engine queue: handlers to spare, but 8 running and 8 waiting
    # sequences; streamed requests leave their handler at once, so the
    # engine's Submit refuses the rest.
    ("engine queue", ["--max-running", "8", "--max-waiting", "8"], "all"),
]


def part_burst(args, common):
    return [burst_one(args, common, name, caps, streamed) for name, caps, streamed in BURSTS]


def burst_one(args, common, name, caps, streamed):
    burst = 200
    server = Server(args.braid, args.model, extra=common + caps).start()
    try:
        results = [None] * burst
        gate = threading.Barrier(burst)

        def one(i):
            stream = streamed == "all" or i % 2 == 0
            body = {"prompt": f"Burst request {i}: count to five.", "max_tokens": 32,
                    "temperature": 0, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            gate.wait()
            results[i] = post(server.port, body, stream=stream)

        probe = {}

        def health():
            # While the burst holds every handler: /health must still answer.
            time.sleep(1.0)
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=CLIENT_TIMEOUT_S)
            try:
                t = time.monotonic()
                conn.request("GET", "/health")
                probe["status"] = conn.getresponse().status
                probe["ms"] = round(1e3 * (time.monotonic() - t), 1)
            except (OSError, http.client.HTTPException) as e:
                probe["status"], probe["ms"] = str(e), None
            finally:
                conn.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(burst)]
        threads.append(threading.Thread(target=health))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        ok = [r for r in results if r.status == 200 and r.error is None]
        refused = [r for r in results if r.status == 429]
        timeouts = [r for r in results if r.timeout]
        other = [r for r in results if r not in ok and r not in refused]
        lat429 = [r.done_s for r in refused]
        no_retry_after = sum(1 for r in refused if not r.retry_after)
        # Idle: nothing running or waiting in any engine, no stream open.
        idle_deadline = time.monotonic() + 60
        while True:
            m = metrics(server.port)
            busy = (total(m, "num_requests_running") + total(m, "num_requests_waiting") +
                    total(m, "http_streams_open"))
            if busy == 0 or time.monotonic() > idle_deadline:
                break
            time.sleep(0.2)
        kv_total, kv_free = total(m, "kv_blocks_total"), total(m, "kv_blocks_free")
        kv_cached = total(m, "kv_blocks_cached")
        held = kv_total - kv_free - kv_cached
        after = post(server.port, {"prompt": "After the burst: say hi.", "max_tokens": 8,
                                   "temperature": 0, "stream": True}, stream=True)
        out = {
            "cap": name, "streamed": streamed, "burst": burst, "caps": " ".join(caps), "wall_s": round(wall, 2),
            "ok_200": len(ok), "refused_429": len(refused), "timeouts": len(timeouts),
            "other_errors": len(other), "other_kinds": sorted({str(r.error) for r in other}),
            "http_rejected_busy": total(m, "http_rejected_busy_total"),
            "p50_429_ms": round(1e3 * pct(lat429, 50), 1),
            "p99_429_ms": round(1e3 * pct(lat429, 99), 1),
            "max_429_ms": round(1e3 * max(lat429), 1) if lat429 else 0.0,
            "429_without_retry_after": no_retry_after,
            "idle_after": busy == 0,
            "kv_blocks_total": kv_total, "kv_blocks_free": kv_free, "kv_blocks_cached": kv_cached,
            "kv_blocks_held_by_requests": held,
            "request_after_burst_ok": after.error is None,
            "health_during_burst": probe.get("status"), "health_during_burst_ms": probe.get("ms"),
        }
        print(f"\n== 2. above the {name} cap: {burst} requests at once ({streamed} streamed), "
              f"server {' '.join(caps)}")
        print(f"answers in {out['wall_s']} s: {len(ok)} x 200, {len(refused)} x 429 "
              f"({out['http_rejected_busy']:.0f} by the handler queue, the rest by the engine "
              f"queue), {len(other)} other errors{' ' + str(out['other_kinds']) if other else ''}, "
              f"{len(timeouts)} timeouts (limit: 0 other errors, 0 timeouts at {CLIENT_TIMEOUT_S:.0f} s)")
        print(f"429 latency p50 {out['p50_429_ms']} ms, p99 {out['p99_429_ms']} ms, max "
              f"{out['max_429_ms']} ms (limit: p99 < 1000 ms); without Retry-After: {no_retry_after}")
        print(f"idle after: {out['idle_after']}; KV blocks total {kv_total:.0f}, free {kv_free:.0f}, "
              f"cached {kv_cached:.0f}, held by requests {held:.0f} (limit: 0); "
              f"a request after the burst: {'ok' if after.error is None else after.error}")
        print(f"GET /health 1 s into the burst: {probe.get('status')} in {probe.get('ms')} ms "
              "(limit: 200)")
        out["pass"] = (len(timeouts) == 0 and len(other) == 0 and out["idle_after"] and held == 0
                       and (not lat429 or pct(lat429, 99) < 1.0) and no_retry_after == 0
                       and after.error is None and len(ok) > 0 and probe.get("status") == 200)
        return out
    finally:
        server.stop()


# ---- part 3: HTTP against in-process ------------------------------------------


def http_wave(port, c, prompt_len, gen_len, rng):
    """c concurrent streamed requests of prompt_len random token ids, gen_len
    greedy tokens each (EOS ignored): generated tok/s over the wall time, and
    the decode rate while all c were streaming (as braid bench --serve)."""
    results = [None] * c
    gate = threading.Barrier(c + 1)

    def one(i, prompt):
        gate.wait()
        results[i] = post(port, {"prompt": prompt, "max_tokens": gen_len, "temperature": 0,
                                 "ignore_eos": True, "stream": True,
                                 "stream_options": {"include_usage": True}}, stream=True)

    prompts = [[rng.randrange(100, 10000) for _ in range(prompt_len)] for _ in range(c)]
    threads = [threading.Thread(target=one, args=(i, prompts[i])) for i in range(c)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    gate.wait()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    bad = [r for r in results if r.error is not None]
    if bad:
        raise RuntimeError("HTTP wave failed: " + bad[0].error)
    generated = sum(r.completion_tokens for r in results)
    lo = max(r.chunk_times[0] for r in results)
    hi = min(r.chunk_times[-1] for r in results)
    in_window = sum(sum(1 for t in r.chunk_times if lo < t <= hi) for r in results)
    return generated / wall, (in_window / (hi - lo) if hi > lo else 0.0)


def inproc_run(args, c, prompt_len, gen_len, reps, tmpdir):
    path = os.path.join(tmpdir, "inproc.json")
    # The level twice, the first a warm-up (as the server's first wave):
    # a fresh process's first level also pays for touching its KV pages.
    cmd = [args.braid, "bench", "--serve", "-m", args.model, "-t", str(args.threads), "-c", f"{c},{c}",
           "--prompt-len", str(prompt_len), "--gen-len", str(gen_len), "-r", str(reps),
           "--json", path]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("braid bench --serve failed: " + p.stderr[-2000:])
    level = json.load(open(path))["levels"][-1]
    return level["gen_tok_s"], level["decode_tok_s"]


def part_overhead(args, common):
    c, prompt_len, gen_len = 16, 16, 32  # part 1's prompts are ~16 tokens, max_tokens 32
    rounds, reps = (1, 1) if args.quick else (3, 1)
    rng = random.Random(7)
    tmpdir = tempfile.mkdtemp(prefix="braid-bench-http-")
    server = Server(args.braid, args.model, extra=common + ["--max-running", str(c)]).start()
    rows = []
    try:
        http_wave(server.port, c, prompt_len, gen_len, rng)  # warm-up, not counted
        for rnd in range(rounds):
            ip_gen, ip_dec = inproc_run(args, c, prompt_len, gen_len, reps, tmpdir)
            srv0, me0, w0 = proc_cpu_s(server.proc.pid), self_cpu_s(), time.monotonic()
            th0 = thread_cpu_s(server.proc.pid)
            waves = [http_wave(server.port, c, prompt_len, gen_len, rng) for _ in range(reps)]
            w = time.monotonic() - w0
            srv_cpu = (proc_cpu_s(server.proc.pid) - srv0) / w
            me_cpu = (self_cpu_s() - me0) / w
            th1 = thread_cpu_s(server.proc.pid)
            # The busiest threads (the engine's compute threads lead) and the
            # rest together (HTTP I/O and handler threads among them).
            shares = sorted(((v - th0.get(k, 0.0)) / w for k, v in th1.items()), reverse=True)
            by_thread = {"top": [round(x, 3) for x in shares[:args.threads]],
                         "rest": round(sum(shares[args.threads:]), 3), "threads": len(shares)}
            waves.sort(key=lambda x: x[1])
            h_gen, h_dec = waves[len(waves) // 2]
            rows.append({"round": rnd + 1, "inproc_gen_tok_s": round(ip_gen, 1),
                         "inproc_decode_tok_s": round(ip_dec, 1), "http_gen_tok_s": round(h_gen, 1),
                         "http_decode_tok_s": round(h_dec, 1),
                         "ratio_gen": round(h_gen / ip_gen, 3), "ratio_decode": round(h_dec / ip_dec, 3),
                         "server_cpu_cores": round(srv_cpu, 2), "client_cpu_cores": round(me_cpu, 2),
                         "server_cpu_by_thread": by_thread, "load1": os.getloadavg()[0]})
    finally:
        server.stop()
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    out = {"concurrency": c, "prompt_len": prompt_len, "gen_len": gen_len, "threads": args.threads,
           "rounds": rounds, "reps_per_round": reps, "per_round": rows,
           "median_ratio_gen": med("ratio_gen"), "median_ratio_decode": med("ratio_decode"),
           "median_inproc_gen_tok_s": med("inproc_gen_tok_s"), "median_http_gen_tok_s": med("http_gen_tok_s"),
           "median_inproc_decode_tok_s": med("inproc_decode_tok_s"),
           "median_http_decode_tok_s": med("http_decode_tok_s")}
    print(f"\n== 3. overhead: {c} concurrent streams, prompt {prompt_len} random tokens, "
          f"{gen_len} generated (EOS ignored), -t {args.threads}; {rounds} rounds of "
          f"`braid bench --serve -c {c},{c} -r {reps}` (the second level) then {reps} HTTP "
          "waves (median wave); both after a warm-up wave")
    print("| round | in-process gen tok/s | HTTP gen tok/s | ratio | in-process decode tok/s "
          "| HTTP decode tok/s | ratio | server CPU cores | client CPU cores | load 1 min |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['round']} | {r['inproc_gen_tok_s']} | {r['http_gen_tok_s']} | {r['ratio_gen']:.3f} "
              f"| {r['inproc_decode_tok_s']} | {r['http_decode_tok_s']} | {r['ratio_decode']:.3f} "
              f"| {r['server_cpu_cores']} | {r['client_cpu_cores']} | {r['load1']:.2f} |")
    for r in rows:
        t = r["server_cpu_by_thread"]
        print(f"round {r['round']}: server CPU cores, the {args.threads} busiest threads {t['top']}, "
              f"the other {t['threads'] - len(t['top'])} together {t['rest']}")
    out["pass"] = out["median_ratio_gen"] >= 0.95
    print(f"median HTTP / in-process: {out['median_ratio_gen']:.3f} (gen tok/s), "
          f"{out['median_ratio_decode']:.3f} (decode tok/s) (limit: >= 0.95) -> "
          f"{'met' if out['pass'] else 'missed'}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("braid")
    ap.add_argument("model")
    ap.add_argument("--quick", action="store_true", help="10 s load, one overhead round")
    ap.add_argument("--threads", type=int, default=2, help="engine threads (-t), default 2")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,2")
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    cpu = cpu_model()
    load = os.getloadavg()
    print(f"cpu: {cpu} ({os.cpu_count()} logical cores); load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    common = ["-t", str(args.threads), "--kv-tokens", "16384"]
    out = {"cpu": cpu, "logical_cores": os.cpu_count(), "load_at_start": [round(x, 2) for x in load],
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": args.quick,
           "model": os.path.basename(args.model)}
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        pass
    if 1 in parts:
        out["load"] = part_load(args, common)
    if 2 in parts:
        out["burst"] = part_burst(args, common)
    if 3 in parts:
        out["overhead"] = part_overhead(args, common)
    out["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    correctness = (out.get("load", {}).get("pass", True) and
                   all(b["pass"] for b in out.get("burst", [])))
    print(f"\ncorrectness (zero errors, zero timeouts, fast 429s, no leaked KV blocks): "
          f"{'PASS' if correctness else 'FAIL'}; load average at end {out['load_at_end']}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0 if correctness else 1


if __name__ == "__main__":
    sys.exit(main())
