"""Starts and stops `braid serve` for the integration tests, and talks to it
with curl (the client every test here uses for the HTTP API)."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time


class Server:
    def __init__(self, braid, model, extra=(), keys=None, db=None, log=None):
        self.tmp = tempfile.mkdtemp(prefix="braid-serve-")
        self.keyfile = None
        if keys:
            self.keyfile = os.path.join(self.tmp, "keys.txt")
            with open(self.keyfile, "w") as f:
                for name, key in keys.items():
                    f.write(f"{name} {key}\n")
        self.db = db or os.path.join(self.tmp, "runs.db")
        self.log = log or os.path.join(self.tmp, "serve.log")
        cmd = [braid, "serve", "-m", model, "-t", "2", "--port", "0", "--db", self.db,
               "--kv-tokens", "16384"] + list(extra)
        if self.keyfile:
            cmd += ["--api-key-file", self.keyfile]
        self.cmd = cmd
        self.proc = None
        self.port = None

    def start(self, timeout=120):
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=self.logf)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("braid serve exited: " + open(self.log).read()[-2000:])
            text = open(self.log, errors="replace").read()
            ready = re.findall(r"ready on http://[0-9.]+:(\d+)", text)
            if ready:
                self.port = int(ready[-1])
                return self
            time.sleep(0.1)
        raise RuntimeError("braid serve did not get ready: " + open(self.log).read()[-2000:])

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "logf", None):
            self.logf.close()

    def kill9(self):
        self.stop(signal.SIGKILL)


def curl(server, method, path, body=None, key=None, headers=(), raw=None, timeout=120,
         stream=False):
    """(status, body text) of one request made with curl."""
    cmd = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", "--max-time",
           str(timeout)]
    if stream:
        cmd.append("-N")
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    for h in headers:
        cmd += ["-H", h]
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    cmd.append(server.url(path))
    p = subprocess.run(cmd, input=data.encode() if isinstance(data, str) else data,
                       capture_output=True)
    out = p.stdout.decode(errors="replace")
    text, _, code = out.rpartition("\n")
    return int(code or 0), text


def sse_events(text):
    """The JSON payloads of an SSE body ("data: ..." lines), [DONE] as the string."""
    events = []
    for block in text.split("\n\n"):
        data = "\n".join(l[6:] for l in block.split("\n") if l.startswith("data: "))
        if not data:
            continue
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


class Checks:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, flush=True)

    def done(self, name):
        print(f"{name}: {self.passed} checks passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failed else 0)
