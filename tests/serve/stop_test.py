"""Every program of `braid serve` can be stopped, end to end over loopback.

Two clients, alice and bob. Alice submits 20 detached programs stuck in
Lua pattern backtracking, busy loops and loops of host calls; they take
the threads one client may hold, and bob's program still starts and
finishes beside them. Alice cancels all 20 and each ends cancelled.

Then more stuck programs and one normal run, and SIGTERM with
--drain-seconds 2: the server exits with status 0. A server restarted on
the same store resumes them: the normal run finishes, the stuck ones are
failed by --lua-seconds. A stuck program and two quick signals: the
second one exits at once, and the store opens again.

Latencies are printed, never asserted: waits are bounded only against
hangs.

Usage: stop_test.py BRAID MODEL"""
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_util import Checks, Server, curl  # noqa: E402

braid, model = sys.argv[1], sys.argv[2]
ALICE, BOB = "stop-alice-00001", "stop-bob-000002"
HANG = 120  # seconds: only a bound on a hang, never a measure of speed
c = Checks()
tmp = tempfile.mkdtemp(prefix="braid-stop-")
db = os.path.join(tmp, "runs.db")
keys = {"alice": ALICE, "bob": BOB}

# Programs that never end by themselves.
STUCK = {
    # exponential backtracking of Lua patterns
    "pattern-nested": "return function() return string.find(string.rep('a', 40) .. 'b', "
                      "string.rep('a*', 30) .. 'c') end",
    "pattern-lazy": "return function() return ('a'):rep(30000):find('.-.-.-.-x') end",
    # a pure busy loop, and one that pcall cannot shield
    "busy": "return function() while true do end end",
    "busy-pcall": "return function() while true do pcall(function() while true do end end) end end",
    # a loop of host calls
    "host-calls": "return function() local n = 0 while true do n = n + #braid.args + braid.now() "
                  "end end",
}
NORMAL = """
local f = braid.fn [[Count on from {{n}}:{{gen out max_tokens=24}}]]
return function()
  local v = "1"
  for i = 1, 4 do v = f{ n = v }.out:get() end
  return "counted: " .. v
end
"""
QUICK = """
local f = braid.fn [[Say {{w}}:{{gen out max_tokens=4}}]]
return function(w) return f{ w = w }.out:get() end
"""


def submit(srv, source, key, args=None):
    body = {"source": source, "detached": True}
    if args:
        body["args"] = args
    code, text = curl(srv, "POST", "/v1/programs", body, key=key)
    c.check(code == 202, f"submit: {code} {text[:200]}")
    return json.loads(text)["id"] if code == 202 else None


def state(srv, rid, key):
    code, text = curl(srv, "GET", f"/v1/runs/{rid}", key=key, timeout=30)
    return json.loads(text) if code == 200 else {"state": f"http {code}"}


def wait_state(srv, rid, key, done=lambda st: st["state"] not in ("queued", "running"),
               timeout=HANG):
    """Polls the run until done(status); returns (status, seconds waited)."""
    t0 = time.time()
    while True:
        st = state(srv, rid, key)
        # A request that got no answer (a loaded machine) is asked again.
        answered = not st["state"].startswith("http ")
        if (answered and done(st)) or time.time() - t0 > timeout:
            return st, time.time() - t0
        time.sleep(0.05)


def wait_exit(srv, timeout=HANG):
    """The server's exit status and how long it took (None: still running)."""
    t0 = time.time()
    while srv.proc.poll() is None and time.time() - t0 < timeout:
        time.sleep(0.02)
    return srv.proc.poll(), time.time() - t0


def running_of(srv, key):
    code, text = curl(srv, "GET", "/v1/runs?limit=1000&result=false", key=key, timeout=30)
    runs = json.loads(text).get("runs", []) if code == 200 else []
    return sum(1 for r in runs if r["state"] == "running")


srv = None
try:
    # ---- 1. fair threads, and cancel ----------------------------------------
    # 16 threads: alice may hold 12, so 4 stay for other clients.
    srv = Server(braid, model, db=db, keys=keys,
                 extra=["--lua-seconds", "600", "--drain-seconds", "2"]).start()
    kinds = list(STUCK)
    alice = []
    for i in range(20):
        kind = kinds[i % len(kinds)]
        alice.append((kind, submit(srv, STUCK[kind], ALICE)))
    t0 = time.time()
    while running_of(srv, ALICE) < 12 and time.time() - t0 < HANG:
        time.sleep(0.1)
    held = running_of(srv, ALICE)
    c.check(held == 12, f"alice holds {held} threads, not the 12 her cap allows")

    bob = submit(srv, QUICK, BOB, ["bees"])
    st, secs = wait_state(srv, bob, BOB)
    c.check(st["state"] == "done" and isinstance(st.get("result"), str),
            f"bob's program beside alice's stuck ones: {json.dumps(st)[:300]}")
    print(f"bob's program finished in {secs:.2f} s beside alice's {held} stuck ones", flush=True)
    c.check(running_of(srv, ALICE) == 12, "alice's programs were still stuck meanwhile")
    # Another client sees none of it.
    code, _ = curl(srv, "POST", f"/v1/runs/{alice[0][1]}/cancel", key=BOB)
    c.check(code == 404, f"bob cancelling alice's run: {code}")

    latencies = {}
    for kind, rid in alice:
        before = state(srv, rid, ALICE)["state"]
        t0 = time.time()
        code, text = curl(srv, "POST", f"/v1/runs/{rid}/cancel", key=ALICE)
        c.check(code == 200, f"cancel {rid}: {code} {text[:200]}")
        st, _ = wait_state(srv, rid, ALICE)
        took = time.time() - t0
        c.check(st["state"] == "cancelled", f"{kind} {rid} after cancel: {json.dumps(st)[:300]}")
        if before == "running":
            latencies.setdefault(kind, []).append(took)
    every = [t for ts in latencies.values() for t in ts]
    c.check(len(every) >= 12, f"cancelled {len(every)} running programs")
    for kind, ts in sorted(latencies.items()):
        print(f"cancel latency, {kind}: {len(ts)} running, max {max(ts):.3f} s, "
              f"median {statistics.median(ts):.3f} s", flush=True)
    if every:
        print(f"cancel latency, all {len(every)}: max {max(every):.3f} s, "
              f"median {statistics.median(every):.3f} s (POST cancel to state cancelled, "
              f"polled every 50 ms)", flush=True)

    # ---- 2. SIGTERM with stuck programs and a normal run --------------------
    stuck = [(kind, submit(srv, STUCK[kind], ALICE)) for kind in kinds]
    normal = submit(srv, NORMAL, BOB)
    for kind, rid in stuck:
        wait_state(srv, rid, ALICE, done=lambda st: st["state"] != "queued")
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc, secs = wait_exit(srv)
    c.check(rc == 0, f"SIGTERM with {len(stuck)} stuck programs: exit status {rc}")
    print(f"SIGTERM with --drain-seconds 2 and {len(stuck)} stuck programs: exited {rc} "
          f"after {secs:.2f} s", flush=True)
    srv.stop()
    log = open(srv.log, errors="replace").read()
    c.check("interrupting" in log, "the server says it interrupted what still ran")

    # ---- 3. restart: the normal run finishes, limits stop the stuck ---------
    srv = Server(braid, model, db=db, keys=keys,
                 extra=["--lua-seconds", "3", "--drain-seconds", "30"]).start()
    st, secs = wait_state(srv, normal, BOB)
    c.check(st["state"] == "done" and str(st.get("result", "")).startswith("counted: "),
            f"the normal run after the restart: {json.dumps(st)[:300]}")
    print(f"the normal run ended {st['state']} {secs:.2f} s after the restart", flush=True)
    for kind, rid in stuck:
        st, secs = wait_state(srv, rid, ALICE)
        c.check(st["state"] == "failed" and "time limit" in st.get("error", ""),
                f"{kind} {rid} after the restart: {json.dumps(st)[:300]}")
        print(f"{kind}: {st['state']} after the restart ({st.get('error', '')[:60]}...)",
              flush=True)

    # ---- 4. a second signal exits at once -----------------------------------
    last = submit(srv, STUCK["busy"], ALICE)
    wait_state(srv, last, ALICE, done=lambda st: st["state"] != "queued")
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc, secs = wait_exit(srv)
    c.check(rc == 128 + signal.SIGTERM, f"a second SIGTERM: exit status {rc}")
    print(f"a second SIGTERM (drain 30 s): exited {rc} after {secs:.2f} s", flush=True)
    srv.stop()
    srv = Server(braid, model, db=db, keys=keys, extra=["--lua-seconds", "3"]).start()
    st, _ = wait_state(srv, last, ALICE)
    c.check(st["state"] == "failed" and "time limit" in st.get("error", ""),
            f"the run left by the second signal: {json.dumps(st)[:300]}")
    srv.proc.send_signal(signal.SIGTERM)
    rc, _ = wait_exit(srv)
    c.check(rc == 0, f"an idle server's SIGTERM: exit status {rc}")
    srv.stop()
    srv = None
finally:
    if srv:
        srv.kill9()
    if c.failed and srv is not None:
        print(open(srv.log, errors="replace").read()[-3000:], end="")
    if not c.failed:
        shutil.rmtree(tmp, ignore_errors=True)
c.done("stop_test")
