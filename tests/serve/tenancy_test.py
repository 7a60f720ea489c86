"""braid serve keeps API-key clients apart, end to end over loopback with curl.

A key file holds alice, bob and an admin (root, role=admin); the run store
also holds a run of `braid run` made before the server started. Every run
and session route answers bob 404 for alice's ids (as for ids that do not
exist), lists hold the caller's runs only, the admin sees everything (the
CLI run included), /v1/stats and /metrics name no other client to a
non-admin, and a run resumed after kill -9 keeps its owner and its client
in the engines.

Usage: tenancy_test.py BRAID MODEL"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl, sse_events  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
ALICE, BOB, ROOT = "tenancy-alice-0001", "tenancy-bob-00002", "tenancy-root-0003"
HANG = 120  # seconds: only a bound on a hang, never a measure of speed
c = Checks()
tmp = tempfile.mkdtemp(prefix="braid-tenancy-")
db = os.path.join(tmp, "runs.db")
keyfile = os.path.join(tmp, "keys.txt")
with open(keyfile, "w") as f:
    f.write("# the clients of this server\n"
            f"alice {ALICE}\n"
            f"bob {BOB} weight=1\n"
            f"root {ROOT} role=admin\n")

SHORT_DAG = {
    "functions": {"fact": {"template": "One fact about {{x}}:{{gen out max_tokens=4}}"}},
    "calls": [{"id": "f1", "function": "fact", "inputs": {"x": "owls"}}],
    "outputs": ["f1.out"],
}
PROGRAM = """
local f = braid.fn [[Say {{w}}:{{gen out max_tokens=4}}]]
return function(w) return f{ w = w }.out:get() end
"""


def wait_for(what, fn, timeout=HANG):
    """fn() polled until it returns something true (returned); None past the deadline."""
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            if not v:
                c.check(False, f"waited {timeout}s for {what}")
            return v
        time.sleep(0.1)


def get_json(srv, path, key):
    code, body = curl(srv, "GET", path, key=key)
    return code, (json.loads(body) if body.startswith("{") else {})


def settled(srv, rid, key):
    code, st = get_json(srv, f"/v1/runs/{rid}", key)
    return st if code == 200 and st.get("state") not in ("queued", "running") else None


def listed(srv, key):
    code, body = get_json(srv, "/v1/runs?limit=1000&result=false", key)
    c.check(code == 200, f"list runs: {code}")
    return {r["id"] for r in body.get("runs", [])}


def error_message(body):
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None


def denied_as_missing(srv, method, prefix, rid, suffix="", body=None):
    """Bob's request on alice's id answers exactly as one on an id that does not exist."""
    code, text = curl(srv, method, prefix + rid + suffix, body, key=BOB, timeout=60)
    none_code, none_text = curl(srv, method, prefix + "run-none" + suffix, body, key=BOB,
                                timeout=60)
    mine, missing = error_message(text), error_message(none_text)
    c.check(code == 404 and none_code == 404,
            f"bob {method} {prefix}{rid}{suffix}: {code} {text[:200]} (missing id: {none_code})")
    c.check(mine is not None and mine.replace(rid, "run-none") == missing,
            f"bob {method} {prefix}{rid}{suffix}: '{mine}' differs from '{missing}'")


def metric_clients(srv, key):
    """The client label values of /metrics."""
    code, body = curl(srv, "GET", "/metrics", key=key)
    c.check(code == 200 and "braid:runs" in body, f"/metrics: {code} {body[:200]}")
    return set(re.findall(r'client="([^"]*)"', body))


def stats_clients(srv, key):
    """The client names in every sample of /v1/stats, and the raw body."""
    code, body = curl(srv, "GET", "/v1/stats", key=key)
    c.check(code == 200, f"/v1/stats: {code}")
    j = json.loads(body) if code == 200 else {"samples": []}
    return {cl["client"] for s in j["samples"] for cl in s["clients"]}, body


# A run of braid run in the store the server will use: it belongs to no key.
app = os.path.join(tmp, "app.lua")
with open(app, "w") as f:
    f.write(PROGRAM)
cli = subprocess.run([braid, "run", "-m", model, "-t", "2", "--db", db, "--kv-tokens", "4096",
                      "--json", app, "cli"], capture_output=True, text=True, timeout=600)
c.check(cli.returncode == 0, f"braid run: {cli.returncode} {cli.stderr[-500:]}")
cli_id = json.loads(cli.stdout)["run_id"] if cli.returncode == 0 else "run-none"

srv = Server(braid, model, db=db, extra=["--api-key-file", keyfile, "--max-programs", "4"])
srv.start()
try:
    # ---- alice's runs and session ----
    code, body = curl(srv, "POST", "/v1/dags", SHORT_DAG, key=ALICE)
    dag_id = json.loads(body).get("id", "") if code == 200 else ""
    c.check(code == 200 and json.loads(body).get("state") == "done", f"alice's DAG: {code} {body[:200]}")
    code, body = curl(srv, "POST", "/v1/programs",
                      {"source": PROGRAM, "args": ["hi"], "detached": True}, key=ALICE)
    c.check(code == 202, f"alice's program: {code} {body[:200]}")
    prog_id = json.loads(body).get("id", "") if code == 202 else ""
    detached = dict(SHORT_DAG, detached=True)
    code, body = curl(srv, "POST", "/v1/dags", detached, key=ALICE)
    c.check(code == 202, f"alice's detached DAG: {code} {body[:200]}")
    det_id = json.loads(body).get("id", "") if code == 202 else ""

    code, body = curl(srv, "POST", "/v1/sessions", {"name": "alice-s"}, key=ALICE)
    c.check(code == 201, f"alice's session: {code} {body}")
    sid = json.loads(body).get("id", "") if code == 201 else ""
    base = f"/v1/sessions/{sid}"
    code, _ = curl(srv, "POST", base + "/functions",
                   {"name": "echo", "template": "Q: {{q}}\nA:{{gen a max_tokens=4}}"}, key=ALICE)
    c.check(code == 201, f"session function: {code}")
    code, body = curl(srv, "POST", base + "/vars", {"name": "secret", "value": "alice's secret"},
                      key=ALICE)
    var = json.loads(body).get("var", 0) if code == 201 else 0
    code, body = curl(srv, "POST", base + "/calls",
                      {"function": "echo", "inputs": {"q": {"var": var}}}, key=ALICE)
    out = json.loads(body)["outputs"]["a"] if code == 201 else 0
    code, body = curl(srv, "GET", f"{base}/vars/{out}?timeout_ms=60000", key=ALICE)
    c.check(code == 200 and json.loads(body)["state"] == "ready", f"alice reads her call: {code} {body}")

    # A completion for alice and a DAG for bob: per-client figures for both.
    code, _ = curl(srv, "POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2}, key=ALICE)
    c.check(code == 200, f"alice's completion: {code}")
    code, _ = curl(srv, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}, key=BOB)
    c.check(code == 200, f"bob's completion: {code}")
    code, body = curl(srv, "POST", "/v1/dags", SHORT_DAG, key=BOB)
    c.check(code == 200, f"bob's DAG: {code} {body[:200]}")
    bob_id = json.loads(body).get("id", "") if code == 200 else ""
    for rid in (prog_id, det_id):
        st = wait_for(f"alice's run {rid} to end", lambda: settled(srv, rid, ALICE))
        c.check(st and st["state"] == "done", f"alice's run {rid}: {st}")

    # ---- bob on every route of alice's ids: 404, as for ids that do not exist ----
    for rid in (dag_id, prog_id, det_id, sid, cli_id):
        denied_as_missing(srv, "GET", "/v1/runs/", rid)
        denied_as_missing(srv, "GET", "/v1/runs/", rid, "/events")
        denied_as_missing(srv, "GET", "/v1/runs/", rid, "/graph?format=dot")
        denied_as_missing(srv, "POST", "/v1/runs/", rid, "/cancel")
        denied_as_missing(srv, "DELETE", "/v1/runs/", rid)
    denied_as_missing(srv, "POST", "/v1/sessions/", sid, "/functions",
                      {"name": "x", "template": "{{gen o max_tokens=1}}"})
    denied_as_missing(srv, "POST", "/v1/sessions/", sid, "/vars", {"name": "mine"})
    denied_as_missing(srv, "PUT", "/v1/sessions/", sid, f"/vars/{var}", {"value": "bob was here"})
    denied_as_missing(srv, "GET", "/v1/sessions/", sid, f"/vars/{var}?timeout_ms=0")
    denied_as_missing(srv, "POST", "/v1/sessions/", sid, "/calls", {"function": "echo"})
    denied_as_missing(srv, "POST", "/v1/sessions/", sid, "/eval", {"source": "1 + 1"})
    denied_as_missing(srv, "POST", "/v1/sessions/", sid, "/interrupt")
    denied_as_missing(srv, "DELETE", "/v1/sessions/", sid)

    # Nothing of alice's changed.
    code, body = curl(srv, "GET", f"{base}/vars/{var}", key=ALICE)
    c.check(code == 200 and json.loads(body).get("value") == "alice's secret",
            f"alice's variable after bob: {code} {body}")
    for rid in (dag_id, prog_id, det_id):
        code, st = get_json(srv, f"/v1/runs/{rid}", ALICE)
        c.check(code == 200 and st.get("state") == "done" and st.get("client") == "alice",
                f"alice's run {rid} after bob: {code} {st.get('state')} {st.get('client')}")
    code, body = curl(srv, "GET", f"/v1/runs/{det_id}/events", key=ALICE, stream=True, timeout=60)
    events = sse_events(body) if code == 200 else []
    c.check(code == 200 and events and isinstance(events[-1], dict)
            and events[-1].get("state") == "done",
            f"alice's events: {code} {body[:200]}")
    code, body = curl(srv, "GET", f"/v1/runs/{det_id}/graph?format=dot", key=ALICE)
    c.check(code == 200 and "digraph" in body, f"alice's graph: {code} {body[:100]}")

    # ---- lists ----
    mine = listed(srv, ALICE)
    c.check({dag_id, prog_id, det_id, sid} <= mine, f"alice lists her runs: {mine}")
    c.check(bob_id not in mine and cli_id not in mine, f"alice's list holds others' runs: {mine}")
    bobs = listed(srv, BOB)
    c.check(bobs == {bob_id}, f"bob lists only his run: {bobs}")
    everything = listed(srv, ROOT)
    c.check({dag_id, prog_id, det_id, sid, bob_id, cli_id} <= everything,
            f"the admin lists every run: {everything}")
    code, body = get_json(srv, "/v1/runs?limit=1", ALICE)
    c.check(code == 200 and len(body["runs"]) == 1 and body["runs"][0]["id"] in mine,
            f"a limited list is still alice's: {body}")

    # ---- the admin sees and may act on everything; the CLI run is the admin's to see ----
    code, st = get_json(srv, f"/v1/runs/{cli_id}", ROOT)
    c.check(code == 200 and st.get("state") == "done" and st.get("client") == "",
            f"the admin reads the CLI run: {code} {st}")
    code, st = get_json(srv, f"/v1/runs/{dag_id}", ROOT)
    c.check(code == 200 and st.get("client") == "alice", f"the admin reads alice's run: {code}")
    code, body = curl(srv, "GET", f"{base}/vars/{var}", key=ROOT)
    c.check(code == 200 and json.loads(body).get("value") == "alice's secret",
            f"the admin reads alice's variable: {code} {body}")
    code, body = curl(srv, "GET", f"/v1/runs/{bob_id}/graph?format=dot", key=ROOT)
    c.check(code == 200, f"the admin's graph of bob's run: {code}")

    # ---- /v1/stats and /metrics: no other client's name for a non-admin ----
    def alice_in_stats():
        names, body = stats_clients(srv, ALICE)
        return (names, body) if "alice" in names else None
    got = wait_for("alice in her /v1/stats", alice_in_stats)
    if got:
        names, body = got
        c.check(names == {"alice"}, f"alice's /v1/stats clients: {names}")
    names, body = stats_clients(srv, BOB)
    c.check(names <= {"bob"}, f"bob's /v1/stats clients: {names}")
    got = wait_for("bob in the admin's /v1/stats",
                   lambda: {"alice", "bob"} <= stats_clients(srv, ROOT)[0])
    c.check(bool(got), "the admin's /v1/stats has every client")

    names = metric_clients(srv, ALICE)
    c.check(names == {"alice"}, f"alice's /metrics clients: {names}")
    names = metric_clients(srv, BOB)
    c.check(names == {"bob"}, f"bob's /metrics clients: {names}")
    names = metric_clients(srv, ROOT)
    c.check({"alice", "bob"} <= names, f"the admin's /metrics clients: {names}")

    # ---- a run resumed after kill -9 keeps its owner and its client ----
    long_dag = {
        "functions": {"count": {"template": "Count from {{n}} upwards:{{gen out max_tokens=256}}"}},
        "calls": [{"id": f"c{i}", "function": "count", "inputs": {"n": str(i)}} for i in range(48)],
        "outputs": [f"c{i}.out" for i in range(48)],
        "detached": True,
    }
    code, body = curl(srv, "POST", "/v1/dags", long_dag, key=ALICE)
    c.check(code == 202, f"alice's long DAG: {code} {body[:200]}")
    long_id = json.loads(body).get("id", "") if code == 202 else ""
    srv.kill9()  # acknowledged, so in the store with its owner
    srv = Server(braid, model, db=db, extra=["--api-key-file", keyfile, "--max-programs", "4"])
    srv.start()
    code, st = get_json(srv, f"/v1/runs/{long_id}", ALICE)
    c.check(code == 200 and st.get("client") == "alice",
            f"the resumed run is alice's: {code} {st.get('client')!r} {st.get('state')}")
    resumed = st.get("state") in ("queued", "running")
    c.check(resumed, f"the long run was resumed: {st.get('state')}")
    code, _ = curl(srv, "GET", f"/v1/runs/{long_id}", key=BOB)
    c.check(code == 404, f"bob reads the resumed run: {code}")
    code, _ = curl(srv, "POST", f"/v1/runs/{long_id}/cancel", key=BOB)
    c.check(code == 404, f"bob cancels the resumed run: {code}")
    c.check(long_id not in listed(srv, BOB), "bob lists the resumed run")
    c.check(long_id in listed(srv, ALICE), "alice lists her resumed run")
    if resumed:
        # Its requests reach the engine as alice's (nothing else of alice's
        # runs in this server), not as an anonymous client.
        got = wait_for("the resumed run's requests as alice's in /metrics",
                       lambda: "alice" in metric_clients(srv, ROOT))
        c.check(bool(got), "the resumed run runs as alice in the engine")
        code, body = curl(srv, "POST", f"/v1/runs/{long_id}/cancel", key=ALICE)
        c.check(code == 200, f"alice cancels her resumed run: {code} {body[:200]}")
        st = wait_for("the resumed run to end", lambda: settled(srv, long_id, ALICE))
        c.check(st and st["state"] == "cancelled", f"the resumed run after cancel: {st}")
finally:
    srv.stop()
    if c.failed:
        print(open(srv.log, errors="replace").read()[-3000:])
c.done("tenancy_test")
