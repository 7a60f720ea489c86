"""braid serve under kill -9: detached DAG runs survive the server being
killed at random moments and restarted on the same run store.

Every run acknowledged with 202 must stay known across restarts, the store
must pass SQLite's integrity check after every kill, a restarted server must
resume what was in flight (replaying finished calls from the store rather
than running them again), and in the end every run must be done with all its
outputs, none left queued or running.

Usage: crash_test.py BRAID MODEL [SEED]"""
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else int(time.time())
rng = random.Random(seed)
CYCLES = 22           # kill -9 and restart at least this many times
MAX_RUNS = 9          # acknowledged runs in all
LAST_TRIES = 5        # extra kills allowed for the last one to land mid-run
DRAIN_TIMEOUT = 300   # seconds for the last server to finish everything
TOPICS = ["owls", "glaciers", "copper", "tides", "bees", "volcanoes", "lighthouses", "moss",
          "comets", "salt", "bridges", "kelp", "thunder", "maps", "clocks", "wolves"]

c = Checks()
tmp = tempfile.mkdtemp(prefix="braid-crash-")
db = os.path.join(tmp, "runs.db")


def make_dag(n):
    """A DAG of 3-5 facts, joined, then summarised: 4-6 calls in all, each
    run's text its own. Named: a resumed run must keep its name."""
    k = 3 + n % 3
    topics = [TOPICS[(n * 5 + i) % len(TOPICS)] for i in range(k)]
    calls = [{"id": f"f{i}", "function": "fact", "inputs": {"x": f"{t} (run {n})"}}
             for i, t in enumerate(topics)]
    calls.append({"id": "sum", "function": "summary", "inputs": {"facts": {"ref": "all"}}})
    dag = {
        "name": f"crash-{n}",
        "functions": {
            "fact": {"template": "Write one short fact about {{x}}:{{gen out max_tokens=16}}"},
            "summary": {"template": "Facts:\n{{facts}}\nOne sentence joining them:"
                                    "{{gen out max_tokens=24}}"},
        },
        "calls": calls,
        "joins": [{"id": "all", "parts": [{"ref": f"f{i}.out"} for i in range(k)], "sep": "\n"}],
        "outputs": ["sum.out", "f0.out"],
        "detached": True,
    }
    return dag


def submit(srv, runs):
    """Submits the next DAG; records its id once the server acknowledged it."""
    n = len(runs)
    dag = make_dag(n)
    code, body = curl(srv, "POST", "/v1/dags", dag, timeout=30)
    if code == 202:
        runs[json.loads(body)["id"]] = sorted(dag["outputs"])
    else:
        c.check(False, f"submitting DAG {n}: {code} {body[:200]}")


def integrity(what):
    """PRAGMA integrity_check of the store as the killed server left it: on a
    copy of the database and its WAL, so that the next server recovers the
    files itself. Returns how many unfinished runs have finished calls
    recorded (what the next server must replay)."""
    check_dir = tempfile.mkdtemp(prefix="check-", dir=tmp)
    for suffix in ("", "-wal", "-journal", "-shm"):
        if os.path.exists(db + suffix):
            shutil.copy(db + suffix, os.path.join(check_dir, "runs.db" + suffix))
    con = sqlite3.connect(os.path.join(check_dir, "runs.db"))
    try:
        ok = con.execute("PRAGMA integrity_check").fetchall()
        fk = con.execute("PRAGMA foreign_key_check").fetchall()
        partial = con.execute(
            "SELECT count(*) FROM runs WHERE status = 'running' AND "
            "EXISTS (SELECT 1 FROM calls WHERE calls.run_id = runs.id)").fetchone()[0]
    finally:
        con.close()
        shutil.rmtree(check_dir)
    c.check(ok == [("ok",)], f"{what}: integrity_check {ok[:5]}")
    c.check(fk == [], f"{what}: foreign_key_check {fk[:5]}")
    return partial


def status(srv, rid):
    code, body = curl(srv, "GET", f"/v1/runs/{rid}", timeout=30)
    return code, (json.loads(body) if code == 200 else {"body": body})


def start(cycle):
    # The kills land at random moments, often before a resumed run finishes
    # a call: --max-attempts 0 keeps resuming it (this test is about losing
    # nothing; stop_test.py covers runs that are not resumed again).
    return Server(braid, model, db=db, log=os.path.join(tmp, f"serve-{cycle}.log"),
                  extra=["--max-attempts", "0"]).start()


def in_flight_with_progress(srv, runs):
    """Whether some run is running with at least one finished call."""
    for rid in runs:
        code, st = status(srv, rid)
        if code == 200 and st.get("state") == "running" and any(
                n.get("state") == "done" for n in st.get("nodes", [])):
            return True
    return False


t0 = time.time()
runs = {}  # acknowledged run id -> its output refs
kills = 0
partial = 0  # unfinished runs with recorded calls at the last kill
srv = None
try:
    cycle = 0
    while True:
        srv = start(cycle)
        # After a restart: every acknowledged run is known, and none is left
        # behind (a run the server could not resume reads "interrupted").
        for rid in runs:
            code, st = status(srv, rid)
            c.check(code == 200, f"cycle {cycle}: run {rid} unknown: {code} {st}")
            c.check(st.get("state") in ("queued", "running", "done"),
                    f"cycle {cycle}: run {rid} is {st.get('state')}: {st}")
        if kills >= CYCLES and (partial or kills >= CYCLES + LAST_TRIES):
            break
        # New work: three DAGs at first, then now and then one or two more.
        new = 3 if cycle == 0 else (rng.choice([0, 0, 1, 2]) if len(runs) < MAX_RUNS else 0)
        for _ in range(min(new, MAX_RUNS - len(runs))):
            submit(srv, runs)
        if kills >= CYCLES - 1:
            # The last kill lands while a run is part way (tried again until
            # the store shows one): the last server must replay its finished
            # calls from the store.
            if not any(status(srv, r)[1].get("state") in ("queued", "running") for r in runs):
                submit(srv, runs)
            deadline = time.time() + 120
            while time.time() < deadline and not in_flight_with_progress(srv, runs):
                time.sleep(0.1)
        else:
            time.sleep(rng.uniform(0.2, 3.0))
        srv.kill9()
        kills += 1
        partial = integrity(f"after kill {kills}")
        cycle += 1

    # The last server finishes everything.
    deadline = time.time() + DRAIN_TIMEOUT
    states = {}
    while time.time() < deadline:
        states = {rid: status(srv, rid) for rid in runs}
        if all(st.get("state") not in ("queued", "running") for _, st in states.values()):
            break
        time.sleep(1)
    replayed = 0
    for rid, outputs in runs.items():
        code, st = states[rid]
        c.check(code == 200 and st.get("state") == "done",
                f"run {rid} ends {st.get('state')}: {json.dumps(st)[:300]}")
        result = st.get("result") or {}
        c.check(sorted(result) == outputs and all(isinstance(v, str) for v in result.values()),
                f"run {rid}: outputs {outputs}, result {json.dumps(result)[:300]}")
        replayed += sum(1 for n in st.get("nodes", []) if n.get("engine") == "store")
    c.check(replayed > 0, "a resumed run replayed finished calls from the store")
    srv.stop(signal.SIGTERM)
    srv = None
    integrity("after the last server stopped")
    print(f"crash_test: seed {seed}, {kills} kill -9 cycles, {len(runs)} runs, "
          f"{partial} resumed part way by the last server, {replayed} calls replayed there, "
          f"{time.time() - t0:.1f} s", flush=True)
finally:
    if srv:
        srv.kill9()
    if c.failed:
        logs = sorted(f for f in os.listdir(tmp) if f.endswith(".log"))
        if logs:
            print(open(os.path.join(tmp, logs[-1]), errors="replace").read()[-1500:], end="")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
c.done("crash_test")
