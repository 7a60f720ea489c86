"""Remote engines: one `braid serve` uses another over loopback as an
engine (OpenAI-compatible completions with token-id prompts), beside an
embedded one. A DAG's calls run on both; select calls (choice scoring)
stay on the embedded engine; when the remote server dies mid-run, its
calls move to the embedded engine and the run completes.

Usage: remote_test.py BRAID MODEL"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
c = Checks()
far = Server(braid, model, keys={"front": "far-key-0000001"}, extra=["-t", "1"]).start()
tmp = far.tmp
with open(os.path.join(tmp, "far.key"), "w") as f:
    f.write("far-key-0000001\n")
engines = {"engines": [
    {"name": "near", "kind": "embedded", "model": os.path.abspath(model), "threads": 1},
    {"name": "far", "kind": "remote", "url": f"http://127.0.0.1:{far.port}",
     "model": "SmolLM2-135M-Instruct.Q4_1", "api_key_file": "far.key"}]}
with open(os.path.join(tmp, "engines.json"), "w") as f:
    json.dump(engines, f)
front = Server(braid, model, extra=["--engines", os.path.join(tmp, "engines.json")]).start()


def dag(n, tokens, select=False):
    fns = {"fact": {"template": "Fact {{i}} about the sea:{{gen out max_tokens=%d}}" % tokens}}
    calls = [{"id": f"c{i}", "function": "fact", "inputs": {"i": str(i)}} for i in range(n)]
    outs = [f"c{i}.out" for i in range(n)]
    if select:
        fns["pick"] = {"template": "Is the sea wet? {{select ans choices=[\"yes\",\"no\"]}}"}
        calls.append({"id": "p", "function": "pick"})
        outs.append("p.ans")
    return {"functions": fns, "calls": calls, "outputs": outs}


try:
    code, body = curl(front, "POST", "/v1/dags", dag(6, 12, select=True))
    res = json.loads(body) if code == 200 else {}
    c.check(res.get("state") == "done", f"DAG over near+far: {code} {body[:300]}")
    st = json.loads(curl(front, "GET", f"/v1/runs/{res.get('id')}")[1])
    placed = {n["label"] + "#" + str(n["id"]): n["engine"] for n in st.get("nodes", [])}
    c.check("far" in placed.values() and "near" in placed.values(),
            f"calls ran on both engines: {placed}")
    c.check(all(e == "near" for k, e in placed.items() if k.startswith("pick")),
            f"the select call stays on the embedded engine: {placed}")
    code, body = curl(far, "GET", "/metrics", key="far-key-0000001")
    c.check("braid:requests_total" in body, "the far server served requests")

    # The far server dies mid-run: its calls move to the near engine.
    code, body = curl(front, "POST", "/v1/dags", dict(dag(6, 48), detached=True))
    rid = json.loads(body)["id"]
    time.sleep(1.5)
    far.kill9()
    state = ""
    for _ in range(600):
        state = json.loads(curl(front, "GET", f"/v1/runs/{rid}")[1])["state"]
        if state not in ("queued", "running"):
            break
        time.sleep(0.5)
    st = json.loads(curl(front, "GET", f"/v1/runs/{rid}")[1])
    c.check(state == "done", f"the run completes without the far server: {state} {st.get('error')}")
    code, body = curl(front, "GET", "/health")
    c.check(code in (200, 503), f"/health answers: {code}")
finally:
    front.stop()
    far.stop()
    if c.failed:
        print(open(front.log, errors="replace").read()[-2000:])
c.done("remote_test")
