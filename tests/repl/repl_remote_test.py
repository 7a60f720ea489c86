#!/usr/bin/env python3
"""braid repl --server: a DAG built input by input in a session of a
braid serve gets the values `braid run` gets for the same program and
seeds (tests/repl/three_calls.lua); errors, multi-line inputs, Ctrl-C
during a get and the commands work over HTTP; a wrong key is refused.

usage: repl_remote_test.py BRAID MODEL"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))
from serve_util import Server, curl  # noqa: E402

KEY = "KEYKEYKEY1"

INPUTS = """\
fact = braid.fn { name = "fact", prompt = [[One fact about {{x}}:{{gen out max_tokens=16 temperature=0.9 seed=7}}]] }
pair = braid.fn { name = "pair", prompt = [[A: {{a}}
B: {{b}}
The more surprising of the two is{{gen out max_tokens=16 temperature=0.9 seed=11}}]] }
a = fact { x = "owls" }.out
b = fact { x = "whales" }.out
c = pair { a = a, b = b }.out
{ a = a, b = b, c = c:get() }
1 +
2
error("boom")
:vars
:runs
:graph {graph}
:stats
:model
"""


def json_block(text):
    """The first JSON object printed over several lines ('{' to '}')."""
    m = re.search(r"^\{\n.*?^\}$", text, re.S | re.M)
    return json.loads(m.group(0)) if m else None


def generating(server):
    """Whether a call of a running run (a session) is generating on the server."""
    status, body = curl(server, "GET", "/v1/runs?result=false", key=KEY)
    if status != 200:
        return False
    for r in json.loads(body).get("runs", []):
        if r.get("state") != "running":
            continue
        status, body = curl(server, "GET", "/v1/runs/" + r["id"], key=KEY)
        if status == 200 and any(n["state"] == "running" and n.get("generated_tokens", 0) > 0
                                 for n in json.loads(body).get("nodes", [])):
            return True
    return False


def main():
    braid, model = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="braid-repl-remote-")
    failures = []

    def check(name, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
        if not ok:
            failures.append(name)

    # The program as braid run runs it.
    run = subprocess.run([braid, "run", "-m", model, "-t", "2", "--db", os.path.join(tmp, "run.db"),
                          os.path.join(HERE, "three_calls.lua")],
                         capture_output=True, text=True, timeout=600)
    check("braid run", run.returncode == 0, run.stderr[-500:])
    expected = json.loads(run.stdout)

    server = Server(braid, model, keys={"alice": KEY}).start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        graph = os.path.join(tmp, "session.svg")
        repl = subprocess.run([braid, "repl", "--server", url, "--api-key", KEY],
                              input=INPUTS.replace("{graph}", graph), capture_output=True,
                              text=True, timeout=600)
        out = repl.stdout
        print(out)
        check("exit status 0", repl.returncode == 0, repl.stderr[-500:])
        got = json_block(out)
        check("the values equal braid run's with the same seeds", got == expected,
              f"repl {got!r} vs run {expected!r}")
        check("an expression left open continues", re.search(r"^3$", out, re.M) is not None)
        check("an error names the input and line",
              re.search(r"^error: input\d+:1: boom$", out, re.M) is not None)
        check(":vars shows the three outputs ready, each with its function and node",
              len(re.findall(r"^ +\d+  (fact|pair)\.out #\d+ +ready ", out, re.M)) == 3)
        session = re.search(r"^(run-\S+)  session, running, client alice  \(this session\)$", out, re.M)
        check(":runs names the session", session is not None)
        check(":graph writes the SVG", os.path.exists(graph) and "<svg" in open(graph).read())
        check(":stats", re.search(r"^engine0: \d+ requests", out, re.M) is not None)
        check(":model", re.search(r"^engine0: .*\(cpu\)$", out, re.M) is not None)
        if session:
            # The session is closed when the REPL leaves; its DAG stays readable.
            status, body = curl(server, "GET", "/v1/runs/" + session.group(1), key=KEY)
            nodes = json.loads(body).get("nodes", []) if status == 200 else []
            check("the server ran the three calls in the session",
                  len(nodes) == 3 and all(n["state"] == "done" for n in nodes), body[:300])

        # Ctrl-C during a long get stops that input only.
        p = subprocess.Popen([braid, "repl", "--server", url, "--api-key", KEY],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        p.stdin.write('count = braid.fn { prompt = "Count to 5000: 1, 2, 3, {{gen out max_tokens=3000}}" }\n'
                      'count{}.out:get()\n')
        p.stdin.flush()
        # Ctrl-C once the get is generating on the server (the REPL clears the
        # flag when an input starts, so an earlier one would be lost); the
        # deadline only bounds a hang.
        deadline = time.time() + 120
        while p.poll() is None and time.time() < deadline and not generating(server):
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        # The next input waits in the pipe until the interrupted one has ended.
        p.stdin.write("40 + 2\n")
        p.stdin.flush()
        try:
            out2, err2 = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out2, err2 = p.communicate()
        print(out2)
        check("Ctrl-C stops the get", re.search(r"^interrupted$", out2, re.M) is not None, out2 + err2)
        check("the session goes on after Ctrl-C", re.search(r"^42$", out2, re.M) is not None, out2)

        bad = subprocess.run([braid, "repl", "--server", url, "--api-key", "WRONGKEY9"],
                             input="", capture_output=True, text=True, timeout=60)
        check("a wrong key is refused", bad.returncode == 1 and "401" in bad.stderr, bad.stderr)
    finally:
        server.stop()
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
