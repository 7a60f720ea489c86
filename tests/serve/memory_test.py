"""braid serve under memory pressure keeps its budget, end to end over loopback.

A server with a stated budget (--memory-mb 1024, --client-memory-mb 512) and
two clients takes the workloads that once aborted it: a 9,999-deep chain of
joins, three DAGs that are chains of 10,000 calls, and twenty detached
programs returning 100 MB each, from both clients at once. The server stays
up and /health answers throughout; every submission is either accepted or
refused with 413/429 naming the cap; every accepted run ends (done, or
failed naming the memory budget); each client's runs within its budget
finish, a 100 MB result comes back whole, and the process's peak resident
memory stays within its start plus twice the budget (the budget counts
estimates; the bound only catches memory nobody counts).

Usage: memory_test.py BRAID MODEL"""
import json
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
ALICE, BOB = "memory-alice-0001", "memory-bob-000002"
HANG = 600  # seconds: only a bound on a hang, never a measure of speed
BUDGET_MB = 1024
c = Checks()


def chain_dag(n):
    calls = [{"id": "c0", "function": "s", "inputs": {"x": "hi"}}]
    for i in range(1, n):
        calls.append({"id": f"c{i}", "function": "s", "inputs": {"x": {"ref": f"c{i - 1}.out"}}})
    return {"functions": {"s": {"template": "Say {{x}}{{gen out max_tokens=1}}"}},
            "calls": calls, "outputs": [f"c{n - 1}.out"], "detached": True}


def join_chain_dag(n):
    joins = [{"id": "j0", "parts": [{"ref": "c0.out"}], "sep": ""}]
    for i in range(1, n):
        joins.append({"id": f"j{i}", "parts": [{"ref": f"j{i - 1}"}, "."], "sep": ""})
    return {"functions": {"s": {"template": "Say hi{{gen out max_tokens=2}}"}},
            "calls": [{"id": "c0", "function": "s", "inputs": {}}], "joins": joins,
            "outputs": [f"j{n - 1}"], "detached": True}


BIG = "local s = string.rep('x', 100 * 1024 * 1024) return s"


def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def submit(srv, path, body, key):
    """The run id when accepted; None when refused (checked to name the cap)."""
    code, text = curl(srv, "POST", path, body=body, key=key, timeout=HANG)
    if code == 202:
        return json.loads(text)["id"]
    c.check(code in (413, 429) and "memory budget" in text,
            f"{path}: accepted or refused naming the memory budget (got {code} {text[:200]})")
    return None


def run_state(srv, rid, key):
    code, text = curl(srv, "GET", f"/v1/runs?limit=1000&result=false", key=key)
    if code != 200:
        return None
    for r in json.loads(text)["runs"]:
        if r["id"] == rid:
            return r
    return None


def wait_end(srv, rid, key):
    deadline = time.time() + HANG
    while time.time() < deadline:
        r = run_state(srv, rid, key)
        if r and r["state"] in ("done", "failed", "cancelled"):
            code, text = curl(srv, "GET", f"/v1/runs/{rid}?", key=key, timeout=HANG)
            return json.loads(text) if code == 200 else r
        time.sleep(0.2)
    c.check(False, f"run {rid} ended within {HANG}s")
    return None


srv = Server(braid, model, keys={"alice": ALICE, "bob": BOB},
             extra=["--memory-mb", str(BUDGET_MB), "--client-memory-mb", str(BUDGET_MB // 2)])
srv.start()
pid = srv.proc.pid
start_kb = rss_kb(pid)
health = {"ok": 0, "bad": 0}
stop = threading.Event()


def poll_health():
    while not stop.is_set():
        try:
            with urllib.request.urlopen(srv.url("/health"), timeout=30) as r:
                health["ok" if r.status == 200 else "bad"] += 1
        except Exception as e:  # noqa: BLE001 - any failure is a failed probe
            health["bad"] += 1
            print("health probe failed:", e, flush=True)
        time.sleep(0.2)


prober = threading.Thread(target=poll_health, daemon=True)
prober.start()
try:
    # 1. The deep join chain is accepted and finishes.
    rid = submit(srv, "/v1/dags", join_chain_dag(9999), ALICE)
    c.check(rid is not None, "the 9,999-deep join chain is accepted")
    if rid:
        r = wait_end(srv, rid, ALICE)
        c.check(r and r["state"] == "done", f"the join chain finishes: {r and r.get('error')}")

    # 2. Three 10,000-call chains: accepted or refused by name; they hold
    # alice's budget while they run.
    chains = [submit(srv, "/v1/dags", chain_dag(10000), ALICE) for _ in range(3)]
    c.check(any(chains), "a 10,000-call chain DAG is accepted")
    print(f"chains accepted: {sum(1 for x in chains if x)} of 3", flush=True)

    # 3. Twenty 100 MB programs, ten from each client, at once.
    programs = []
    for i in range(20):
        key = ALICE if i % 2 == 0 else BOB
        rid = submit(srv, "/v1/programs", {"source": BIG, "detached": True}, key)
        if rid:
            programs.append((rid, key))
    ends = {"done": 0, "budget": 0}
    done_bob = None
    for rid, key in programs:
        r = wait_end(srv, rid, key)
        if not r:
            continue
        if r["state"] == "done":
            ends["done"] += 1
            if key == BOB:
                done_bob = rid
        else:
            ok = r["state"] == "failed" and "memory budget" in r.get("error", "")
            c.check(ok, f"a 100 MB program that did not finish failed naming the budget: {r}")
            ends["budget"] += ok
    print(f"100 MB programs: {len(programs)} accepted, {ends['done']} done, "
          f"{ends['budget']} failed naming the budget", flush=True)
    c.check(done_bob is not None, "bob's programs within his budget finish beside alice's DAGs")
    if done_bob:
        code, text = curl(srv, "GET", f"/v1/runs/{done_bob}", key=BOB, timeout=HANG)
        result = json.loads(text).get("result", "") if code == 200 else ""
        c.check(len(result) == 100 * 1024 * 1024, f"a 100 MB result comes back whole ({len(result)})")

    # 4. Alice's chains cancelled give her budget back: her next one finishes.
    for rid in chains:
        if rid:
            curl(srv, "POST", f"/v1/runs/{rid}/cancel", key=ALICE)
            r = wait_end(srv, rid, ALICE)
            c.check(r and r["state"] == "cancelled", f"a chain is cancelled: {r and r['state']}")
    rid = submit(srv, "/v1/programs", {"source": BIG, "detached": True}, ALICE)
    r = wait_end(srv, rid, ALICE) if rid else None
    c.check(r and r["state"] == "done", f"alice's 100 MB program finishes once she holds less: {r}")
finally:
    stop.set()
    prober.join(timeout=60)
    alive = srv.proc.poll() is None
    peak_kb = rss_kb(pid, "VmHWM") if alive else 0
    srv.stop()

c.check(alive, "the server is still running")
c.check(health["bad"] == 0 and health["ok"] > 0, f"/health answered throughout: {health}")
grown_mb = (peak_kb - start_kb) / 1024
print(f"peak RSS {peak_kb / 1024:.0f} MB, {grown_mb:.0f} MB over the start; budget {BUDGET_MB} MB",
      flush=True)
c.check(grown_mb < 2 * BUDGET_MB, f"peak memory within twice the budget ({grown_mb:.0f} MB)")
c.done("memory_test")
