"""The dashboard in headless Chromium against a real `braid serve` with an API
key: the key taken from the URL fragment, a program's run followed live to the
end (list, run state, node rows, graph, charts, clients), a 14-way fan-in
drawn whole in its panel (fitted in width and height, with zoom and pan, its
boxes relabelled as node events come, the events naming their functions), a
wrong key bringing up the key form, and no page exceptions or console errors. Chromium is driven
over the DevTools protocol on a pipe (fds 3 and 4, JSON messages ended by a NUL
byte): no library beyond Python's.

Usage: dashboard_test.py BRAID_BINARY MODEL_GGUF [--screenshot PATH]
           [--program LUAFILE] [--keep-screenshot-at-mid-run PATH] [--dashboard-dir DIR]
           [--fan-in-screenshot PATH]
Exits 0 on success, 1 on a failure, 77 (skip) when Chromium is missing or
cannot start."""
import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_util import Server  # noqa: E402

KEY = "KEYKEYKEY1"
SKIP = 77

# A small map-reduce (as apps/map_reduce/app.lua, the text inline): four
# summaries in a group, a join, one combine. A few seconds on two CPU cores.
PROGRAM = r'''
local summarize = braid.fn { name = "summarize", system = "You summarize text accurately and briefly.", prompt = [[
Summarize this passage in one sentence.

{{chunk}}

Summary: {{gen summary max_tokens=SUMMARY_TOKENS stop="\n"}}]] }

local combine = braid.fn { name = "combine", system = "You write crisp abstracts.", prompt = [[
Summaries of the parts of one document:
{{parts}}

Write one short paragraph about the whole document: {{gen abstract max_tokens=ABSTRACT_TOKENS stop="\n\n"}}]] }

local doc = [[
Owls are nocturnal birds of prey with large eyes and silent flight. They hunt mice and insects at night and swallow small prey whole.

Whales are marine mammals that breathe air through blowholes. The blue whale is the largest animal known to have lived on Earth.

Bees pollinate flowers while they collect nectar and pollen. A colony has one queen, thousands of workers and, in summer, some drones.

Octopuses have eight arms, three hearts and blue blood. They change colour and texture in a moment to hide from predators.]]

return function()
  local parts = {}
  for chunk in doc:gmatch("[^\n]+") do
    parts[#parts + 1] = summarize{ chunk = chunk }.summary
  end
  braid.log("map: " .. #parts .. " summaries")
  local abstract = combine{ parts = braid.join(parts, "\n") }.abstract
  return { summaries = parts, abstract = abstract:get{ criteria = "latency" } }
end
'''


def step(msg):
    print("==", msg, flush=True)


class Failure(Exception):
    pass


def skip(msg):
    print("SKIP: " + msg, file=sys.stderr, flush=True)
    sys.exit(SKIP)


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Chromium with --remote-debugging-pipe: the browser reads commands on its
    fd 3 and writes answers and events on its fd 4."""

    def __init__(self, exe, log_path):
        self.profile = tempfile.mkdtemp(prefix="braid-dashboard-chromium-")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def fds():  # in the child, before exec: the pipe ends at 3 and 4
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.log = open(log_path, "ab")
        cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
               "--user-data-dir=" + self.profile, "--window-size=1400,1000",
               "--no-first-run", "--no-default-browser-check", "about:blank"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     preexec_fn=fds, close_fds=False, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buf = b""
        self.next_id = 0
        self.exceptions = []      # Runtime.exceptionThrown
        self.console_errors = []  # console.error / console.assert

    def _write(self, data):
        while data:
            n = os.write(self.to_browser, data)
            data = data[n:]

    def _read_messages(self, timeout):
        """The messages that arrive within `timeout` seconds (at least one read)."""
        ready, _, _ = select.select([self.from_browser], [], [], timeout)
        if not ready:
            return []
        chunk = os.read(self.from_browser, 1 << 20)
        if not chunk:
            raise Failure("chromium closed its DevTools pipe (it exited: %s)" % self.proc.poll())
        self.buf += chunk
        *msgs, self.buf = self.buf.split(b"\0")
        return [json.loads(m) for m in msgs if m]

    def _on_event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            text = (d.get("exception") or {}).get("description") or d.get("text")
            self.exceptions.append(f"{text} at {d.get('url', '?')}:{d.get('lineNumber', '?')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = [a.get("value", a.get("description", "")) for a in params.get("args", [])]
            self.console_errors.append(" ".join(str(a) for a in args))

    # Timeouts here and below only bound a hang: chromium and the page's
    # refreshes can be slow on a loaded machine.
    def send(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._write(json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            for m in self._read_messages(max(0.0, deadline - time.time())):
                if m.get("id") == mid:
                    if "error" in m:
                        raise Failure(f"{method}: {m['error']}")
                    return m.get("result", {})
                self._on_event(m)
        raise Failure(f"{method}: no answer from chromium in {timeout} s")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except Exception:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own process group
                self.proc.wait()
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """A tab, attached with flatten=true: its commands carry the session id."""

    def __init__(self, browser):
        self.b = browser
        self.target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget",
                                    {"targetId": self.target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method, params=None, timeout=60):
        return self.b.send(method, params, session=self.session, timeout=timeout)

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise Failure(f"evaluating {expr[:80]!r}: {r['exceptionDetails'].get('text')} "
                          f"{r.get('result', {}).get('description', '')}")
        return r.get("result", {}).get("value")

    def check_page(self):
        if self.b.exceptions:
            raise Failure("exception in the page: " + " | ".join(self.b.exceptions))
        if self.b.console_errors:
            raise Failure("console error in the page: " + " | ".join(self.b.console_errors))

    def wait(self, expr, what, timeout=60):
        """Polls `expr` until it is truthy; returns its value."""
        deadline = time.time() + timeout
        while True:
            self.check_page()
            v = self.eval(expr)
            if v:
                return v
            if time.time() > deadline:
                status = self.eval("document.querySelector('#status')?.textContent")
                raise Failure(f"timed out after {timeout} s waiting for {what} (status line: {status!r})")
            time.sleep(0.1)

    def navigate(self, url):
        self.send("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete' && !!document.querySelector('#runs')",
                  "the page to load")

    def screenshot(self, path):
        """The whole page, beyond the window too."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 4000), "scale": 1}
        self._save(path, self.send("Page.captureScreenshot",
                                   {"format": "png", "clip": clip, "captureBeyondViewport": True}))

    def top_screenshot(self, path, below):
        """The page from its top to a little below the element `below`."""
        bottom = self.eval(f"document.querySelector('{below}').getBoundingClientRect().bottom + 12")
        width = self.eval("document.documentElement.clientWidth")
        clip = {"x": 0, "y": 0, "width": width, "height": bottom, "scale": 1}
        self._save(path, self.send("Page.captureScreenshot", {"format": "png", "clip": clip}))

    def _save(self, path, shot):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        step(f"screenshot: {path}")

    def close(self):
        self.b.send("Target.closeTarget", {"targetId": self.target})


def api(srv, method, path, body=None, key=KEY):
    req = urllib.request.Request(srv.url(path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Authorization", "Bearer " + key)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class EventReader(threading.Thread):
    """GET /v1/runs/ID/events, its events collected as they come."""

    def __init__(self, srv, run_id):
        super().__init__(daemon=True)
        req = urllib.request.Request(srv.url(f"/v1/runs/{run_id}/events"))
        req.add_header("Authorization", "Bearer " + KEY)
        self.resp = urllib.request.urlopen(req, timeout=600)
        self.events = []
        self.start()

    def run(self):
        try:
            for line in self.resp:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    self.events.append(json.loads(line[6:]))
        except (OSError, ValueError):
            pass  # the server stopped


# The graph's box and what it shows, in the page's CSS pixels.
GRAPH_GEOMETRY = """(() => {
  const box = document.querySelector('#graph');
  const g = box && box.querySelector('svg g.graph');
  if (!g) return null;
  const b = box.getBoundingClientRect(), r = g.getBoundingClientRect();
  const rect = (x) => [x.left, x.top, x.right, x.bottom];
  const within = (x) => x.left >= b.left - 1 && x.right <= b.right + 1 && x.top >= b.top - 1 && x.bottom <= b.bottom + 1;
  return {box: rect(b), graph: rect(r), width: innerWidth,
          nodes: box.querySelectorAll('g.node').length,
          inside: within(r) && [...box.querySelectorAll('g.node')].every((n) => within(n.getBoundingClientRect()))};
})()"""

# Records node events after which the node's box in the graph does not say
# the event's state (its second line: "running, latency", "done", ...).
WATCH_LABELS = """(() => {
  window.staleLabels = [];
  const handle = onEvent;
  window.onEvent = (ev) => {
    handle(ev);
    if (ev.type !== 'node') return;
    const g = document.querySelector(`#graph g.node[data-node-id="${ev.node}"]`);
    const lines = g ? [...g.querySelectorAll('text')].map((t) => t.textContent) : [];
    if (g && !lines.some((l) => l.split(',')[0] === ev.state))
      staleLabels.push(`node ${ev.node} ${ev.state}: ${lines.join(' / ')}`);
  };
  return true;
})()"""


def fan_in(srv, page, screenshot):
    """A session's 14 calls held by a variable not yet set, then one call of
    all their outputs: the page draws the whole fan-in inside its panel, zooms
    and pans, and relabels the boxes as node events come."""
    step("a 14-way fan-in in a session, held until a variable is set")
    code, body = api(srv, "POST", "/v1/sessions", {"name": "fan-in"})
    if code != 201:
        raise Failure(f"POST /v1/sessions: {code} {body}")
    sid = json.loads(body)["id"]
    base = "/v1/sessions/" + sid
    reader = EventReader(srv, sid)  # before any node exists: it sees every node event
    parts = 14
    funcs = [("part", "Item {{i}}{{gate}}: {{gen out max_tokens=1 temperature=0}}"),
             ("combine", "".join("{{a%d}} " % k for k in range(parts)) +
              "All: {{gen out max_tokens=1 temperature=0}}")]
    for name, template in funcs:
        code, body = api(srv, "POST", base + "/functions", {"name": name, "template": template})
        if code != 201:
            raise Failure(f"POST functions {name}: {code} {body}")
    code, body = api(srv, "POST", base + "/vars", {"name": "gate"})
    if code != 201:
        raise Failure(f"POST vars: {code} {body}")
    gate = json.loads(body)["var"]
    outs = []
    for k in range(parts):
        code, body = api(srv, "POST", base + "/calls",
                         {"function": "part", "inputs": {"i": str(k), "gate": {"var": gate}}})
        if code != 201:
            raise Failure(f"POST calls: {code} {body}")
        outs.append(json.loads(body)["outputs"]["out"])
    code, body = api(srv, "POST", base + "/calls",
                     {"function": "combine", "inputs": {"a%d" % k: {"var": v} for k, v in enumerate(outs)}})
    if code != 201:
        raise Failure(f"POST calls combine: {code} {body}")
    final = json.loads(body)["outputs"]["out"]
    code, dot = api(srv, "GET", f"/v1/runs/{sid}/graph?format=dot")
    if code == 200 and "rankdir=LR" not in dot:
        raise Failure("a fan-in wider than deep is not drawn left to right: " + dot[:200])

    # The nodes: the variable's (a host node), the parts, the combine.
    code, body = api(srv, "GET", "/v1/runs/" + sid)
    labels = {n["id"]: n["label"] for n in json.loads(body)["nodes"]}
    if sorted(labels.values()) != sorted(["host", "combine"] + ["part"] * parts):
        raise Failure(f"the session's nodes: {labels}")
    combine = next(i for i, label in labels.items() if label == "combine")

    page.eval(f"location.hash = 'run={sid}'")
    page.wait(f"""(() => {{ const g = [...document.querySelectorAll('#graph g.node')];
        return g.length === {len(labels)} && g.every((n) => n.getAttribute('data-state') === 'waiting'); }})()""",
              "the fan-in's graph, every node waiting")
    geo = page.eval(GRAPH_GEOMETRY)
    print(f"   graph box {geo['box']}, drawing {geo['graph']}, window width {geo['width']}")
    if not geo["inside"]:
        raise Failure(f"the fan-in is not drawn inside its panel: {geo}")
    if geo["box"][2] > geo["width"] + 1:
        raise Failure(f"the graph's panel is wider than the window: {geo}")

    step("zoom (buttons, wheel) and pan (drag) the graph, then fit it again")
    width = lambda g: g["graph"][2] - g["graph"][0]  # noqa: E731
    fitted = width(geo)
    button = "document.querySelector('#graph-tools button[data-zoom=%s]').click()"
    page.eval(button % "in")
    zoomed = page.eval(GRAPH_GEOMETRY)
    if not width(zoomed) > 1.1 * fitted:
        raise Failure(f"zoom in: the drawing is {width(zoomed):.0f} px wide, fitted {fitted:.0f}")
    page.eval(button % "out")
    page.eval(button % "out")
    if not width(page.eval(GRAPH_GEOMETRY)) < 0.95 * fitted:
        raise Failure("zoom out did not shrink the drawing")
    page.eval(button % "fit")
    if abs(width(page.eval(GRAPH_GEOMETRY)) - fitted) > 2:
        raise Failure("fit did not bring the fitted drawing back")
    b = geo["box"]
    cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    page.send("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": cx, "y": cy, "deltaX": 0, "deltaY": -300})
    page.wait(f"(() => {{ const g = {GRAPH_GEOMETRY}; return g.graph[2] - g.graph[0] > {1.1 * fitted}; }})()",
              "the wheel to zoom in")
    page.eval(button % "fit")
    page.send("Input.dispatchMouseEvent", {"type": "mousePressed", "x": cx, "y": cy, "button": "left",
                                           "buttons": 1, "clickCount": 1})
    page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": cx + 80, "y": cy + 40,
                                           "button": "left", "buttons": 1})
    page.send("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": cx + 80, "y": cy + 40,
                                           "button": "left", "buttons": 0, "clickCount": 1})
    moved = page.eval(GRAPH_GEOMETRY)
    dx, dy = moved["graph"][0] - geo["graph"][0], moved["graph"][1] - geo["graph"][1]
    if abs(dx - 80) > 2 or abs(dy - 40) > 2:
        raise Failure(f"a drag by (80, 40) moved the drawing by ({dx:.1f}, {dy:.1f})")
    page.eval(button % "fit")
    if max(abs(a - b) for a, b in zip(page.eval(GRAPH_GEOMETRY)["graph"], geo["graph"])) > 1:
        raise Failure("fit did not bring the drawing back after a drag")

    step("setting the variable: every node runs; each box says its state as its event comes")
    page.eval(WATCH_LABELS)
    code, body = api(srv, "PUT", f"{base}/vars/{gate}", {"value": "."})
    if code != 200:
        raise Failure(f"PUT vars: {code} {body}")
    code, body = api(srv, "GET", f"{base}/vars/{final}?criteria=latency&timeout_ms=60000")
    if code != 200 or json.loads(body).get("state") != "ready":
        raise Failure(f"the fan-in's output: {code} {body}")
    page.wait("""(() => { const g = [...document.querySelectorAll('#graph g.node')];
        const rows = [...document.querySelectorAll('#nodes tr[data-node-id]')];
        return g.length && g.every((n) => n.getAttribute('data-state') === 'done') &&
               rows.length === g.length && rows.every((r) => r.dataset.state === 'done'); })()""",
              "every node done in the graph and the table")
    stale = page.eval("window.staleLabels")
    if stale:
        raise Failure("boxes kept another state than their node's event: " + "; ".join(stale[:4]))
    page.wait("""![...document.querySelectorAll('#graph g.node text')].some((t) => /^(waiting|running)\\b/.test(t.textContent))""",
              "no box saying waiting or running")
    geo = page.eval(GRAPH_GEOMETRY)
    if not geo["inside"]:
        raise Failure(f"the finished fan-in is not drawn inside its panel: {geo}")

    step("the event stream's node events name their node's function")
    deadline = time.time() + 60
    while not any(e.get("type") == "node" and e.get("state") == "done" and e.get("node") == combine
                  for e in reader.events):
        if time.time() > deadline:
            raise Failure(f"no 'done' event of the combine node: {reader.events[-5:]}")
        time.sleep(0.1)
    nodes = [e for e in reader.events if e.get("type") == "node"]
    got = {e["node"]: e.get("label") for e in nodes}
    calls = {i: label for i, label in labels.items() if label != "host"}
    if {i: got.get(i) for i in calls} != calls or any(got[i] != labels.get(i) for i in got):
        raise Failure(f"node events' labels {got}, not {labels}")
    done = [e for e in nodes if e["state"] == "done"]
    if not all(isinstance(e.get("end_ms"), (int, float)) and e["end_ms"] >= e.get("start_ms", -1) >= 0
               for e in done):
        raise Failure(f"a done event without its times: {done[:2]}")
    print(f"   {len(nodes)} node events, each with its label")
    if screenshot:
        page.top_screenshot(screenshot, "#graph")
    api(srv, "DELETE", base)


# What the page shows of the selected run.
RUN_VIEW = """(() => {
  const st = document.querySelector('#run-state');
  return {
    run: st ? st.dataset.state : null,
    rows: [...document.querySelectorAll('#nodes tr[data-node-id]')].map(r => r.dataset.state),
    graph: [...document.querySelectorAll('#graph g.node')].map(g => g.getAttribute('data-state')),
    graphMessage: document.querySelector('#graph .message')?.textContent || '',
  };
})()"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("braid")
    ap.add_argument("model")
    ap.add_argument("--screenshot", default=os.path.join(os.environ.get("BRAID_TEST_ARTIFACTS", "."),
                                                         "dashboard.png"))
    ap.add_argument("--program", help="a Lua program to run instead of the built-in map-reduce")
    ap.add_argument("--keep-screenshot-at-mid-run", metavar="PATH",
                    help="also a screenshot while the run is still running")
    ap.add_argument("--dashboard-dir", metavar="DIR",
                    help="serve the page from DIR (braid serve --dashboard-dir) instead of the built-in files")
    ap.add_argument("--fan-in-screenshot", metavar="PATH",
                    help="also the top of the page showing the fan-in's graph (docs/img/dashboard_fan_in.png)")
    args = ap.parse_args()

    exe = find_chromium()
    if not exe:
        skip("no Chromium on PATH (chromium, chromium-browser, google-chrome); "
             "install it (apt-get install chromium) to run the dashboard test")
    if args.program:
        with open(args.program) as f:
            source = f.read()
    else:
        # Longer outputs when a mid-run screenshot is wanted, so there is a middle to catch.
        mid = bool(args.keep_screenshot_at_mid_run)
        source = (PROGRAM.replace("SUMMARY_TOKENS", "64" if mid else "24")
                  .replace("ABSTRACT_TOKENS", "96" if mid else "32"))

    srv = browser = None
    try:
        step("starting braid serve with an API key file (alice)")
        extra = ["--dashboard-dir", args.dashboard_dir] if args.dashboard_dir else []
        srv = Server(args.braid, args.model, keys={"alice": KEY}, extra=extra).start()
        step(f"server on port {srv.port}; log {srv.log}")
        base = f"http://127.0.0.1:{srv.port}/"

        step(f"starting {exe} headless")
        try:
            browser = Browser(exe, os.path.join(srv.tmp, "chromium.log"))
            version = browser.send("Browser.getVersion", timeout=60)
        except Exception as e:  # noqa: BLE001
            log = ""
            try:
                log = open(os.path.join(srv.tmp, "chromium.log"), errors="replace").read()[-1500:]
            except OSError:
                pass
            skip(f"chromium does not start: {e}\n{log}")
        step("chromium " + version.get("product", "?"))
        page = Page(browser)

        step("opening the page with #key=...")
        page.navigate(base + "#key=" + KEY)
        href = page.eval("location.href")
        if KEY in href:
            raise Failure(f"the key is still in the address bar: {href}")

        step("submitting a program (detached)")
        code, body = api(srv, "POST", "/v1/programs", {"source": source, "detached": True})
        if code != 202:
            raise Failure(f"POST /v1/programs: {code} {body}")
        run_id = json.loads(body)["id"]
        step(f"run {run_id}")

        if args.keep_screenshot_at_mid_run:
            # Selected at once through the fragment: the list shows it only at its next refresh.
            page.eval(f"location.hash = 'run={run_id}'")
            v = page.wait("""(() => {
                const s = document.querySelector('#run-state')?.dataset.state;
                const out = [...document.querySelectorAll('#nodes td.output')]
                  .reduce((n, td) => n + td.textContent.length, 0) > 120;
                return (s === 'running' && out) || ['done', 'failed', 'cancelled'].includes(s) ? s : '';
              })()""", "the run to be running with some output", timeout=60)
            if v != "running":
                print(f"note: the run was already {v} for the mid-run screenshot", flush=True)
            page.screenshot(args.keep_screenshot_at_mid_run)

        step("waiting for the run in the list, then clicking it")
        sel = f'#runs li[data-run-id="{run_id}"]'
        page.wait(f"!!document.querySelector('{sel}')", "the run in the list")
        page.eval(f"document.querySelector('{sel}').click()")
        page.wait(f"document.querySelector('#run-title')?.textContent.includes('{run_id}')",
                  "the run selected")

        step("waiting for the run, its nodes and graph to be done in the page")
        deadline = time.time() + 120
        while True:
            page.check_page()
            view = page.eval(RUN_VIEW)
            graph_ok = (view["graph"] and all(s == "done" for s in view["graph"])) or \
                view["graphMessage"].startswith("No graph")
            if view["run"] in ("failed", "cancelled"):
                raise Failure(f"the run ended {view['run']}: {api(srv, 'GET', '/v1/runs/' + run_id)[1][:800]}")
            if view["run"] == "done" and view["rows"] and all(s == "done" for s in view["rows"]) and graph_ok:
                break
            if time.time() > deadline:
                raise Failure(f"timed out waiting for the run to be done in the page: {view}")
            time.sleep(0.2)
        print(f"   run done; node rows {view['rows']}; graph nodes {view['graph'] or view['graphMessage']}")

        step("checking the page against the API")
        code, body = api(srv, "GET", "/v1/runs/" + run_id)
        run = json.loads(body)
        n = len(run["nodes"])
        if len(view["rows"]) != n:
            raise Failure(f"{len(view['rows'])} node rows for {n} nodes")
        if view["graph"] and len(view["graph"]) != n:
            raise Failure(f"{len(view['graph'])} graph nodes for {n} nodes")
        if view["graphMessage"]:
            print("   note: " + view["graphMessage"])
        ids = page.eval("[...document.querySelectorAll('#nodes tr[data-node-id]')].map(r => +r.dataset.nodeId)")
        if sorted(ids) != sorted(x["id"] for x in run["nodes"]):
            raise Failure(f"node ids in the table {ids} vs the run's")
        empty = page.eval("""[...document.querySelectorAll('#nodes tr[data-node-id]')]
            .filter(r => !r.querySelector('td.output').textContent.trim()).map(r => r.dataset.nodeId)""")
        if empty:
            raise Failure(f"nodes without output text: {empty}")
        # The result is fetched after the run's end shows, so it may come a moment later.
        shown = ("!document.querySelector('#run-result-box').hidden && "
                 "document.querySelector('#run-result').textContent.includes('abstract')")
        result_deadline = time.time() + 60
        while not args.program and not page.eval(shown):
            if time.time() > result_deadline:
                raise Failure("the run's result is not shown")
            time.sleep(0.2)

        points = page.wait("""(() => {
            const p = document.querySelector('#engines .engine[data-engine] svg.chart[data-metric=tokens_per_s] polyline');
            return p && +p.dataset.points >= 2 ? +p.dataset.points : 0; })()""",
                           "the tokens chart to have 2 points")
        print(f"   tokens chart: {points} points")
        for metric in ("running_waiting", "kv_used", "prefix_hit"):
            if not page.eval(f"!!document.querySelector('svg.chart[data-metric={metric}] polyline')"):
                raise Failure(f"no {metric} chart")
        # A sample after the run's end: alice has generated tokens and runs nothing.
        gen = page.wait("""(() => {
            const row = document.querySelector('#clients tr[data-client="alice"]');
            const num = (col) => row ? parseFloat(row.querySelector(`td[data-col=${col}]`).textContent.replace(/,/g, '')) : 0;
            return row && num('generated_tokens') > 0 && num('running') === 0 ? row.querySelector('td[data-col=generated_tokens]').textContent : '';
          })()""", "alice's generated tokens in #clients")
        print(f"   clients: alice generated {gen} tokens")

        href = page.eval("location.href")
        if KEY in href:
            raise Failure(f"the key is in the address bar: {href}")
        if page.eval("sessionStorage.getItem('braid.key')") != KEY:
            raise Failure("sessionStorage does not hold the key")
        if not page.eval("document.querySelector('#auth').hidden"):
            raise Failure("the key form is shown although the key is good")
        status = page.eval("document.querySelector('#status').textContent")
        if status:
            raise Failure(f"the status line shows an error: {status}")
        page.check_page()
        page.screenshot(args.screenshot)

        fan_in(srv, page, args.fan_in_screenshot)
        page.check_page()

        step("a wrong key brings up the key form; the right one typed in puts it away")
        page2 = Page(browser)
        page2.navigate(base + "#key=wrong-key-0000")
        page2.wait("!document.querySelector('#auth').hidden", "#auth to be shown")
        if "wrong-key" in page2.eval("location.href"):
            raise Failure("the wrong key is in the address bar")
        page2.eval(f"""(() => {{ document.querySelector('#auth-key').value = '{KEY}';
                       document.querySelector('#auth').requestSubmit(); return true; }})()""")
        page2.wait(f"document.querySelector('#auth').hidden && "
                   f"!!document.querySelector('#runs li[data-run-id=\"{run_id}\"]')",
                   "the runs list after typing the key")
        page2.check_page()
        page2.close()
        page.check_page()
        print("dashboard_test: passed", flush=True)
        return 0
    except (Failure, RuntimeError, OSError, ValueError) as e:  # a server that does not start: RuntimeError
        print(f"FAIL: {e}", flush=True)
        if srv:
            print(f"   (server log: {srv.log})", flush=True)
        return 1
    finally:
        if browser:
            browser.close()
        if srv:
            srv.stop()


if __name__ == "__main__":
    sys.exit(main())
