"""braid serve end to end over loopback, with curl as the client: auth,
health, the DAG, program and incremental (session) APIs and their SSE
streams, the run routes, the limits and errors, and a program run through
/v1/programs giving what `braid run` gives for the same file and seed.

Usage: api_test.py BRAID MODEL"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl, sse_events  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
KEY, KEY2 = "test-key-alice-0001", "test-key-bob-00002"
c = Checks()
srv = Server(braid, model, keys={"alice": KEY, "bob": KEY2},
             extra=["--max-programs", "2", "--max-queued", "2", "--max-body-mb", "1"]).start()

PROGRAM = """
local f = braid.fn [[Write one sentence about {{topic}}:{{gen s max_tokens=24 temperature=0.8 seed=7}}]]
return function(topic) return f{ topic = topic }.s:get() end
"""
DAG = {
    "functions": {
        "fact": {"template": "One fact about {{x}}:{{gen out max_tokens=12 stop=\"\\n\"}}"},
        "pair": {"template": "Fact A: {{a}}\nFact B: {{b}}\nWhich is more surprising?{{gen out max_tokens=12}}"},
    },
    "calls": [
        {"id": "cmp", "function": "pair", "inputs": {"a": {"ref": "f1.out"}, "b": {"ref": "f2.out"}}},
        {"id": "f1", "function": "fact", "inputs": {"x": "owls"}},
        {"id": "f2", "function": "fact", "inputs": {"x": "whales"}},
    ],
    "outputs": [{"ref": "cmp.out", "criteria": "latency"}, "f1.out"],
}



def run_state(rid, until, timeout=120):
    """The run's state, polled until until(state) holds; the timeout only bounds a hang."""
    deadline = time.time() + timeout
    while True:
        st = json.loads(curl(srv, "GET", f"/v1/runs/{rid}", key=KEY)[1])["state"]
        if until(st) or time.time() > deadline:
            return st
        time.sleep(0.1)


def settled(st):
    return st not in ("queued", "running")


try:
    # Health without a key; everything else needs one.
    code, body = curl(srv, "GET", "/health")
    c.check(code == 200 and json.loads(body)["status"] == "ok", f"/health: {code} {body}")
    code, body = curl(srv, "GET", "/v1/models")
    c.check(code == 401 and json.loads(body)["error"]["type"] == "authentication_error",
            f"no key: {code} {body}")
    code, _ = curl(srv, "GET", "/v1/models", key="wrong-key-000000")
    c.check(code == 401, "wrong key")
    code, body = curl(srv, "GET", "/v1/models", key=KEY)
    c.check(code == 200 and json.loads(body)["data"][0]["id"], f"/v1/models: {code} {body}")
    code, body = curl(srv, "GET", "/v1/nothing", key=KEY)
    c.check(code == 404, f"unknown route: {code}")
    code, body = curl(srv, "DELETE", "/v1/models", key=KEY)
    c.check(code == 405, f"wrong method: {code}")

    # A DAG tied to its connection: the answer is the result.
    code, body = curl(srv, "POST", "/v1/dags", DAG, key=KEY)
    res = json.loads(body) if code == 200 else {}
    c.check(code == 200 and res.get("state") == "done", f"DAG: {code} {body[:300]}")
    c.check(isinstance(res.get("result", {}).get("cmp.out"), str), "DAG result has cmp.out")
    run_id = res.get("id", "")
    code, body = curl(srv, "GET", f"/v1/runs/{run_id}", key=KEY)
    st = json.loads(body) if code == 200 else {}
    c.check(code == 200 and len(st.get("nodes", [])) == 3, f"run status: {code} {body[:300]}")
    c.check(all(n["state"] == "done" for n in st.get("nodes", [])), "all nodes done")
    c.check(st.get("client") == "alice", f"the run's client is the key's name: {st.get('client')}")
    code, body = curl(srv, "GET", f"/v1/runs/{run_id}/graph", key=KEY)
    c.check(code == 200 and "<svg" in body, f"graph: {code} {body[:100]}")
    code, body = curl(srv, "GET", "/v1/runs", key=KEY)
    c.check(code == 200 and any(r["id"] == run_id for r in json.loads(body)["runs"]), "runs list")

    # A DAG streamed: run, node and token events, then [DONE].
    dag = dict(DAG, stream=True)
    code, body = curl(srv, "POST", "/v1/dags", dag, key=KEY, stream=True)
    events = sse_events(body)
    kinds = {e.get("type") for e in events if isinstance(e, dict)}
    c.check(code == 200 and {"run", "node", "tokens"} <= kinds and events[-1] == "[DONE]",
            f"DAG stream: {code} kinds {kinds} last {events[-1] if events else None}")
    per_var = {}
    for e in events:
        if isinstance(e, dict) and e.get("type") == "tokens":
            per_var[e["var"]] = per_var.get(e["var"], "") + e["text"]
    final = [e for e in events if isinstance(e, dict) and e.get("type") == "run"][-1]
    c.check(final.get("state") == "done" and final["result"]["f1.out"] in per_var.values(),
            f"a variable's token deltas add up to its value: {per_var} {final.get('result')}")

    # Detached: 202 with the id; events of the run by id.
    code, body = curl(srv, "POST", "/v1/dags", dict(DAG, detached=True), key=KEY)
    c.check(code == 202, f"detached DAG: {code}")
    rid = json.loads(body)["id"]
    code, body = curl(srv, "GET", f"/v1/runs/{rid}/events", key=KEY, stream=True, timeout=120)
    ev = sse_events(body)
    c.check(code == 200 and ev and ev[-1].get("type") == "run" and ev[-1].get("state") == "done",
            f"events of a detached run: {code} {ev[-1] if ev else None}")

    # DAG errors name the place.
    bad = json.loads(json.dumps(DAG))
    bad["calls"][1]["inputs"]["x"] = {"ref": "cmp.out"}
    code, body = curl(srv, "POST", "/v1/dags", bad, key=KEY)
    c.check(code == 400 and "cycle" in body, f"cycle: {code} {body}")
    code, body = curl(srv, "POST", "/v1/dags", raw="[" * 200 + "]" * 200, key=KEY)
    c.check(code == 400 and "nested deeper" in body, f"depth: {code} {body}")
    code, body = curl(srv, "POST", "/v1/dags", raw='{"functions": ', key=KEY)
    c.check(code == 400 and "invalid JSON" in body, f"syntax: {code} {body}")
    code, body = curl(srv, "POST", "/v1/dags", raw="x" * (2 << 20), key=KEY)
    c.check(code == 413, f"body over --max-body-mb: {code}")

    # A program through /v1/programs == braid run of the same file and seed.
    code, body = curl(srv, "POST", "/v1/programs", {"source": PROGRAM, "args": ["owls"]}, key=KEY)
    served = json.loads(body).get("result") if code == 200 else None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(PROGRAM)
    local = subprocess.run([braid, "run", "-q", "--db", "none", "-m", model, "-t", "2",
                            "--kv-tokens", "16384", f.name, "owls"],
                           capture_output=True, text=True, timeout=300)
    os.unlink(f.name)
    c.check(code == 200 and served is not None and served == local.stdout.rstrip("\n"),
            f"program via HTTP {served!r} vs braid run {local.stdout!r}")
    code, body = curl(srv, "POST", "/v1/programs", {"source": "return function() error('boom') end"},
                      key=KEY)
    c.check(code == 200 and json.loads(body)["state"] == "failed" and "boom" in body,
            f"failing program: {body}")
    code, body = curl(srv, "POST", "/v1/programs", {"source": "x = ", "detached": True}, key=KEY)
    rid = json.loads(body)["id"]
    st = run_state(rid, settled)
    c.check("failed" in st, f"syntax error program: {st}")

    # A session (Parrot-style), step by step.
    code, body = curl(srv, "POST", "/v1/sessions", {}, key=KEY2)
    sid = json.loads(body)["id"]
    base = f"/v1/sessions/{sid}"
    code, _ = curl(srv, "POST", base + "/functions",
                   {"name": "ask", "template": "Q: {{q}}\nA:{{gen a max_tokens=16 stop=\"\\n\"}}"}, key=KEY2)
    c.check(code == 201, "session function")
    code, body = curl(srv, "POST", base + "/vars", {"name": "question"}, key=KEY2)
    q = json.loads(body)["var"]
    code, body = curl(srv, "POST", base + "/calls", {"function": "ask", "inputs": {"q": {"var": q}}},
                      key=KEY2)
    a = json.loads(body)["outputs"]["a"]
    code, body = curl(srv, "GET", f"{base}/vars/{a}?timeout_ms=100&criteria=latency", key=KEY2)
    c.check(code == 202 and json.loads(body)["state"] == "pending", f"pending read: {code} {body}")
    code, _ = curl(srv, "PUT", f"{base}/vars/{q}", {"value": "What is the capital of France?"},
                   key=KEY2)
    c.check(code == 200, "set variable")
    code, body = curl(srv, "GET", f"{base}/vars/{a}?timeout_ms=60000&criteria=latency", key=KEY2)
    c.check(code == 200 and json.loads(body)["state"] == "ready", f"ready read: {code} {body}")
    code, body = curl(srv, "GET", f"{base}/vars/{a}?timeout_ms=-5", key=KEY2)
    c.check(code == 400, f"bad timeout: {code}")
    code, _ = curl(srv, "DELETE", base, key=KEY2)
    c.check(code == 200, "close session")

    # Cancel a detached run.
    slow = {"functions": {"g": {"template": "Count:{{gen n max_tokens=400}}"}},
            "calls": [{"id": "c", "function": "g"}], "outputs": ["c.n"], "detached": True}
    code, body = curl(srv, "POST", "/v1/dags", slow, key=KEY)
    rid = json.loads(body)["id"]
    run_state(rid, lambda st: st != "queued")  # cancel it once it runs
    code, body = curl(srv, "POST", f"/v1/runs/{rid}/cancel", key=KEY)
    st = run_state(rid, settled)
    c.check(st == "cancelled", f"cancelled run: {st}")

    # Metrics: Prometheus text with the API's series.
    code, body = curl(srv, "GET", "/metrics", key=KEY)
    c.check(code == 200 and "braid:time_to_first_token_seconds" in body and "braid:runs" in body,
            f"/metrics: {code} {body[:200]}")
finally:
    srv.stop()
    print(open(srv.log, errors="replace").read()[-1500:] if c.failed else "", end="")
c.done("api_test")
