"""Remote engines: one `braid serve` uses another over loopback as an
engine (OpenAI-compatible completions with token-id prompts), beside an
embedded one. A DAG's calls run on both; select calls (choice scoring)
stay on the embedded engine; when the remote server dies mid-run, its
calls move to the embedded engine and the run completes.

Usage: remote_test.py BRAID MODEL"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

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
    # Kill it once a call on it is streaming (or, should the run be over
    # first, at once); the deadline only bounds a hang.
    deadline = time.time() + 120
    while time.time() < deadline:
        st = json.loads(curl(front, "GET", f"/v1/runs/{rid}")[1])
        if st["state"] not in ("queued", "running") or any(
                n["engine"] == "far" and n["state"] == "running" and n["generated_tokens"] > 0
                for n in st.get("nodes", [])):
            break
        time.sleep(0.1)
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
    # A third-party OpenAI-compatible server: llama-cpp-python's, when it is
    # installed (scripts/bench_vs_llamacpp.sh puts it in ~/.cache/braid).
    llama_py = os.environ.get("BRAID_LLAMA_PYTHON",
                              os.path.expanduser("~/.cache/braid/venv-llama/bin/python"))
    if os.path.exists(llama_py) and subprocess.run(
            [llama_py, "-c", "import llama_cpp.server.app"], capture_output=True).returncode == 0:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        lport = sock.getsockname()[1]
        sock.close()
        llama_log = open(os.path.join(tmp, "llama.log"), "wb")
        llama = subprocess.Popen([llama_py, "-m", "llama_cpp.server", "--model",
                                  os.path.abspath(model), "--port", str(lport), "--n_threads", "1",
                                  "--n_ctx", "2048"], stdout=llama_log, stderr=llama_log)
        try:
            up = False
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{lport}/v1/models", timeout=1)
                    up = True
                    break
                except OSError:
                    time.sleep(0.2)
            c.check(up, "llama-cpp-python's server started")
            with open(os.path.join(tmp, "llama.json"), "w") as f:
                json.dump({"engines": [{"name": "llama", "kind": "remote", "prompt": "text",
                                        "url": f"http://127.0.0.1:{lport}", "model": "smollm2"}]}, f)
            third = Server(braid, model, extra=["--engines", os.path.join(tmp, "llama.json")]).start()
            try:
                code, body = curl(third, "POST", "/v1/dags", dag(3, 12))
                res = json.loads(body) if code == 200 else {}
                st = json.loads(curl(third, "GET", f"/v1/runs/{res.get('id')}")[1])
                engines_used = {n["engine"] for n in st.get("nodes", [])}
                c.check(res.get("state") == "done" and engines_used == {"llama"} and
                        all(v for v in res.get("result", {}).values()),
                        f"a DAG on llama-cpp-python's server: {code} {body[:300]} {engines_used}")
            finally:
                third.stop()
        finally:
            llama.terminate()
            llama.wait()
    else:
        print("skipped: llama-cpp-python's server is not installed (third-party engine check)")
finally:
    front.stop()
    far.stop()
    if c.failed:
        print(open(front.log, errors="replace").read()[-2000:])
c.done("remote_test")
