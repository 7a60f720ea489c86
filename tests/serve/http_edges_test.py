"""braid serve at the edges of HTTP, over loopback with raw sockets and curl:
request framing (Transfer-Encoding beside Content-Length), the header
section's size limit, a client that half-closes after its request, results
larger than a stream's backlog cap, DAGs past their size limits, and the
graph route's Graphviz child under a time limit, killed with the server.

Usage: http_edges_test.py BRAID MODEL"""
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
c = Checks()
HANG = 120  # seconds: only a bound on a hang, never a timing check


def exchange(port, data, half_close=False):
    """Sends `data` on a fresh connection, optionally shuts the sending side,
    and returns everything the server sends until it closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            got += b
        return got
    finally:
        s.close()


def final_response(raw):
    """(status, head, body) of the first final response in `raw`, past any
    interim (1xx) ones; (0, b"", b"") when there is none."""
    while raw.startswith(b"HTTP/1."):
        head, _, rest = raw.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        if status >= 200:
            return status, head, rest
        raw = rest
    return 0, b"", b""


def final_status(raw):
    return final_response(raw)[0]


def dechunk(body):
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2:]
    return out


def alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_until(cond, limit=HANG):
    deadline = time.time() + limit
    while not cond() and time.time() < deadline:
        time.sleep(0.1)
    return cond()


srv = Server(braid, model).start()
try:
    port = srv.port

    # Transfer-Encoding beside Content-Length, or not ending in chunked:
    # refused and the connection closed (a proxy could frame it otherwise).
    body = b'{"prompt": "a"}'
    for te in ("xchunked", "chunked"):
        raw = exchange(port, f"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: {te}\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        c.check(final_status(raw) == 400 and raw.count(b"HTTP/1.1") == 1,
                f"TE {te} with CL: {raw[:120]!r}")
    raw = exchange(port, b"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked"
                         b"\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
    c.check(final_status(raw) == 501, f"TE gzip, chunked: {raw[:120]!r}")
    raw = exchange(port, b"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked"
                         b"\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
                         b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    c.check(final_status(raw) == 200 and raw.count(b"HTTP/1.1 200") == 2,
            f"TE chunked alone, then a second request: {raw[:120]!r}")

    # The 16 KiB limit holds for the header section, however the reads
    # split it (Beast counted only what one read brought, past the first).
    fields = "".join(f"X-Field-{i}: {'v' * 40}\r\n" for i in range(330))
    raw = exchange(port, f"GET /v1/models HTTP/1.1\r\nHost: t\r\n{fields}\r\n".encode())
    c.check(final_status(raw) == 431, f"18 KB of small headers: {raw[:120]!r}")
    fields = "".join(f"X-Field-{i}: {'v' * 40}\r\n" for i in range(250)) + "Connection: close\r\n"
    raw = exchange(port, f"GET /v1/models HTTP/1.1\r\nHost: t\r\n{fields}\r\n".encode())
    c.check(final_status(raw) == 200, f"14.5 KB of small headers: {raw[:120]!r}")

    # A half-close after the request: the answer still comes, then the end.
    raw = exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n", half_close=True)
    c.check(final_status(raw) == 200 and b'"object":"list"' in raw.replace(b" ", b""),
            f"half-close, /v1/models: {raw[:200]!r}")
    prog = json.dumps({"source": "return function() return 'half' .. 'closed' end"}).encode()
    raw = exchange(port, b"POST /v1/programs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                         b"\r\nContent-Length: " + str(len(prog)).encode() + b"\r\n\r\n" + prog,
                   half_close=True)
    status, _, body = final_response(raw)
    answer = json.loads(dechunk(body) or b"{}") if status == 200 else {}
    c.check(answer.get("result") == "halfclosed", f"half-close, a program: {raw[:300]!r}")

    # Results past the stream's 8 MiB backlog cap arrive whole.
    size = 9 * 1024 * 1024
    big = "return function() return string.rep('x', 9 * 1024 * 1024) end"
    code, body = curl(srv, "POST", "/v1/programs", {"source": big}, timeout=HANG)
    answer = json.loads(body) if code == 200 and body.strip() else {}
    c.check(len(answer.get("result") or "") == size,
            f"9 MiB result: {code}, {len(body)} bytes: {body[:100]!r}")
    if answer:
        code, body = curl(srv, "GET", f"/v1/runs/{answer['id']}", timeout=HANG)
        st = json.loads(body) if code == 200 else {}
        c.check(len(st.get("result") or "") == size, f"9 MiB result in the run's status: {code}")
    code, body = curl(srv, "POST", "/v1/programs", {"source": big, "stream": True},
                      timeout=HANG, stream=True)
    c.check(code == 200 and len(body) > size and body.rstrip().endswith("data: [DONE]"),
            f"9 MiB result streamed: {code}, {len(body)} bytes")

    # DAGs past a size limit: 413 naming it, no Retry-After.
    dag = {"functions": {"f": {"template": "{{x}}{{gen out max_tokens=1}}"}},
           "calls": [{"id": f"c{i}", "function": "f", "inputs": {"x": "a"}} for i in range(10001)],
           "outputs": ["c0.out"]}
    p = subprocess.run(["curl", "-sS", "-i", "-X", "POST", "-H", "Content-Type: application/json",
                        "--data-binary", "@-", "--max-time", str(HANG), srv.url("/v1/dags")],
                       input=json.dumps(dag).encode(), capture_output=True)
    out = p.stdout.decode(errors="replace")
    c.check(out.startswith("HTTP/1.1 413") and "10000" in out and "retry-after" not in out.lower(),
            f"DAG of 10,001 calls: {out[:300]!r}")
finally:
    srv.stop()

# The graph route's dot: a stand-in that never ends shows the time limit,
# then the child dies with a server killed by -9.
tmp = tempfile.mkdtemp(prefix="braid-dot-")
pids = os.path.join(tmp, "dot.pids")
fake = os.path.join(tmp, "dot")
with open(fake, "w") as f:
    f.write(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 3600\n")
os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
old_path = os.environ["PATH"]
os.environ["PATH"] = tmp + os.pathsep + old_path  # the server finds the stand-in first
srv = Server(braid, model)
try:
    srv.start()
finally:
    os.environ["PATH"] = old_path
started = []
try:
    code, body = curl(srv, "POST", "/v1/programs", {"source": "return function() return 1 end"})
    rid = json.loads(body)["id"] if code == 200 else ""
    c.check(bool(rid), f"a run to draw: {code} {body[:200]}")
    code, body = curl(srv, "GET", f"/v1/runs/{rid}/graph", timeout=HANG)
    c.check(code == 503 and "10 s" in body, f"dot past its time: {code} {body[:200]}")
    started = open(pids).read().split() if os.path.exists(pids) else []
    c.check(len(started) == 1 and wait_until(lambda: not alive(started[0])),
            f"the timed-out dot is gone: {started}")
    code, body = curl(srv, "GET", f"/v1/runs/{rid}/graph?format=dot")
    c.check(code == 200 and body.startswith("digraph"), f"?format=dot: {code} {body[:100]}")

    # The server killed while dot runs: dot goes too.
    waiting = subprocess.Popen(["curl", "-sS", "--max-time", str(HANG),
                                srv.url(f"/v1/runs/{rid}/graph")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c.check(wait_until(lambda: os.path.exists(pids) and len(open(pids).read().split()) == 2),
            "a second dot started")
    started = open(pids).read().split()
    srv.kill9()
    waiting.wait(timeout=HANG)
    c.check(wait_until(lambda: not alive(started[-1])), f"dot dies with the server: {started}")
finally:
    srv.stop()
    for pid in started:  # the stand-ins this test made, should any be left
        if alive(pid):
            os.kill(int(pid), signal.SIGKILL)
c.done("serve_http_edges")
