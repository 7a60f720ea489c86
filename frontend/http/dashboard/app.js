// The Braid dashboard: the server's runs, the selected run's graph, nodes and
// events (live), and each engine's and client's figures over time. Plain JS,
// no build step; it talks only to the /v1 API of the server that serves it
// (docs/dashboard.md, docs/http-api.md).
'use strict';

const KEY_STORE = 'braid.key';      // sessionStorage: the API key of this tab
const RUNS_EVERY_MS = 2000;         // the runs list
const STATS_EVERY_MS = 1000;        // /v1/stats (the server samples once a second)
const REFRESH_MIN_MS = 400;         // a run's JSON and graph, at most this often
const TOKENS_REFRESH_MS = 1000;     // ... and while only tokens arrive, this often
const MAX_EVENTS = 50;              // lines kept in #events
const MAX_SAMPLES = 600;            // what the server keeps too
const OUTPUT_CHARS = 300;           // output text shown per node
const GRAPH_MAX_HEIGHT = 0.7;       // of the window's height: the graph's panel at most
const ZOOM_STEP = 1.25;             // the zoom buttons' factor
const ZOOM_MIN = 0.05, ZOOM_MAX = 4;  // pixels per Graphviz point
const TERMINAL = new Set(['done', 'failed', 'cancelled']);
const RUN_STATES = ['queued', 'running', 'done', 'failed', 'cancelled'];
const SVG_NS = 'http://www.w3.org/2000/svg';

const state = {
  needKey: false,       // a request got 401: the form is up, polling waits
  runs: [],             // GET /v1/runs
  selected: null,       // the selected run's id
  run: null,            // its JSON
  live: new Map(),      // node id -> Map(var id -> text streamed so far)
  stream: null,         // AbortController of the selected run's event stream
  refreshTimer: 0,
  lastRefresh: 0,
  refreshGap: REFRESH_MIN_MS,  // grows for a big run whose refresh takes long
  refreshSeq: 0,        // refreshes started / rendered: a late answer is dropped
  renderedSeq: 0,
  graphMissing: '',     // the server's message when it cannot draw graphs
  graphView: null,      // the part of the graph shown after a zoom or drag; null: fitted
  stats: null,          // {model, engines, samples}
  statsSeq: 0,          // the newest sample's seq
  errors: new Map(),    // source -> message, shown in #status
};

// ---- Small helpers ----

const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;

// el('td', {class: 'num'}, 'text', child, ...): attributes with null values are skipped.
function make(ns, tag, attrs, children) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) e.setAttribute(k, v);
  e.append(...children.filter((c) => c != null));
  return e;
}
const el = (tag, attrs, ...children) => make(null, tag, attrs, children);
const svgEl = (tag, attrs, ...children) => make(SVG_NS, tag, attrs, children);
const badge = (s) => el('span', {class: 'badge', 'data-state': s}, s || '?');

// 12345 -> "12,345"; 1234567 -> "1.2M"; rates get one decimal below 100.
function fmt(v, rate) {
  if (v == null || Number.isNaN(v)) return '–';
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (rate) return Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(1);
  return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toFixed(1);
}
const fmtMs = (v) => (v == null ? '–' : v < 10 ? v.toFixed(1) : Math.round(v).toLocaleString('en-US'));
const pct = (v) => (v == null ? '–' : v >= 10 ? v.toFixed(0) + '%' : v.toFixed(1) + '%');

function age(unix) {
  const s = Math.max(0, Date.now() / 1000 - unix);
  for (const [unit, n] of [['d', 86400], ['h', 3600], ['m', 60]]) if (s >= n) return Math.floor(s / n) + unit;
  return unix ? Math.floor(s) + 's' : '';
}
const clock = (d = new Date()) => d.toTimeString().slice(0, 8);

// "run-20261203-074819-d6ccd2" -> "074819-d6ccd2"
function shortId(id) {
  const m = /^run-\d{8}-(\d{6}-\w+)$/.exec(id);
  return m ? m[1] : id.length > 22 ? id.slice(0, 21) + '…' : id;
}
function truncate(s, n) {
  return s.length > n ? s.slice(0, n) + '…' : s;
}

// ---- The key and the address bar ----

function getKey() {
  try { return sessionStorage.getItem(KEY_STORE) || ''; } catch (e) { return ''; }
}
function setKey(k) {
  try {
    if (k) sessionStorage.setItem(KEY_STORE, k); else sessionStorage.removeItem(KEY_STORE);
  } catch (e) { report('key', new Error('this browser does not keep the key: ' + e.message)); }
  $('#forget-key').hidden = !k;
}

// "#key=K&run=ID" -> {key: "K", run: "ID"} (absent: null). Not URLSearchParams:
// it would read a "+" in a key as a space.
function readHash() {
  const out = {key: null, run: null};
  for (const part of location.hash.replace(/^#/, '').split('&')) {
    const i = part.indexOf('=');
    if (i < 0) continue;
    const name = part.slice(0, i);
    let value = part.slice(i + 1);
    try { value = decodeURIComponent(value); } catch (e) { /* keep it as it is */ }
    if (name === 'key' || name === 'run') out[name] = value;
  }
  return out;
}

// A key in the fragment goes into sessionStorage and out of the address bar
// (and so out of the history); "#run=ID" stays. True when there was one.
function takeKeyFromHash() {
  const h = readHash();
  if (h.key === null) return false;
  if (h.key) setKey(h.key);
  const rest = h.run ? '#run=' + enc(h.run) : '';
  history.replaceState(history.state, '', location.pathname + location.search + rest);
  return true;
}

// ---- The API ----

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// fetch() with the key; 401 brings up the key form; other failures throw an
// HttpError naming the path and the server's message.
async function api(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const key = getKey();
  if (key) headers.set('Authorization', 'Bearer ' + key);
  let res;
  try {
    res = await fetch(path, {...opts, headers, cache: 'no-store'});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new HttpError(0, `${path}: the server cannot be reached (${e.message})`);
  }
  if (res.status === 401) {
    askForKey();
    throw new HttpError(401, 'an API key is needed');
  }
  if (!res.ok) {
    let msg = res.statusText;
    try {
      const j = await res.json();
      msg = (j.error && j.error.message) || msg;
    } catch (e) { /* not JSON */ }
    throw new HttpError(res.status, `${path}: ${res.status} ${msg}`);
  }
  return res;
}
async function getJson(path, opts) {
  const res = await api(path, opts);
  try { return await res.json(); } catch (e) { throw new HttpError(res.status, `${path}: bad JSON (${e.message})`); }
}

// Errors by source ("runs", "stats", ...) in #status; `err` null clears one.
function report(source, err) {
  if (err && err.name === 'AbortError') return;
  if (err && err.status === 401) err = null;  // the key form says it
  if (err) state.errors.set(source, err.message || String(err)); else state.errors.delete(source);
  const s = $('#status');
  s.textContent = [...state.errors.values()].join(' · ');
  s.title = s.textContent;
}

function askForKey() {
  if (state.needKey) return;
  state.needKey = true;
  $('#auth').hidden = false;
  $('#auth-message').textContent = getKey() ? 'The key was refused.' : '';
  $('#auth-key').focus();
}

// After a new key: everything again.
function resume() {
  state.needKey = false;
  $('#auth').hidden = true;
  state.errors.clear();
  report('key', null);
  pollRuns();
  pollStats();
  if (state.selected) {
    const id = state.selected;
    state.selected = null;
    selectRun(id);
  }
}

// Calls fn now and then every `every` ms after it ends; waits while the key form is up.
function loop(fn, every) {
  const tick = async () => {
    if (!state.needKey) await fn();
    setTimeout(tick, every);
  };
  tick();
}

// ---- Runs list ----

async function pollRuns() {
  try {
    const j = await getJson('v1/runs?limit=50&result=false');
    state.runs = Array.isArray(j.runs) ? j.runs : [];
    renderRuns();
    renderHeader();
    report('runs', null);
  } catch (e) { report('runs', e); }
}

function renderRuns() {
  const ul = $('#runs');
  const old = new Map([...ul.querySelectorAll('li[data-run-id]')].map((li) => [li.dataset.runId, li]));
  const items = state.runs.map((r) => {
    const li = old.get(r.id) || el('li', {'data-run-id': r.id, title: r.id});
    li.dataset.state = r.state;
    li.classList.toggle('selected', r.id === state.selected);
    li.replaceChildren(
      el('span', {class: 'run-id'}, shortId(r.id)),
      badge(r.state),
      el('span', {class: 'run-meta'}, runMeta(r)),
      el('span', {class: 'run-age', title: r.created_unix ? new Date(r.created_unix * 1000).toLocaleString() : null},
         age(r.created_unix)));
    return li;
  });
  if (!items.length) items.push(el('li', {class: 'empty'}, 'No runs yet.'));
  ul.replaceChildren(...items);
}

// "program · alice"; a run of an earlier server (only in the store) has no
// kind or client but its program's name.
function runMeta(r) {
  if (r.client === undefined && r.kind === undefined) return [r.program, 'stored'].filter(Boolean).join(' · ');
  return [r.kind, r.client || '(no key)'].filter(Boolean).join(' · ');
}

// "Braid MODEL  2 running · 5 done": from the stats when there are, else the list.
function renderHeader() {
  const model = state.stats && state.stats.model;
  if (model) $('#model').textContent = model;
  const last = state.stats && state.stats.samples[state.stats.samples.length - 1];
  let counts = last && last.runs;
  if (!counts) {
    counts = {};
    for (const r of state.runs) counts[r.state] = (counts[r.state] || 0) + 1;
  }
  const parts = RUN_STATES.filter((s) => counts[s]).map((s) => el('span', {class: 'badge', 'data-state': s}, `${counts[s]} ${s}`));
  $('#counts').replaceChildren(...(parts.length ? parts : ['no runs']));
}

// ---- The selected run ----

function selectRun(id) {
  if (!id || id === state.selected) return;
  if (state.stream) state.stream.abort();
  clearTimeout(state.refreshTimer);
  Object.assign(state, {selected: id, run: null, live: new Map(), stream: null, refreshTimer: 0, graphView: null});
  for (const source of ['run', 'events', 'graph']) report(source, null);
  for (const li of $('#runs').querySelectorAll('li[data-run-id]')) li.classList.toggle('selected', li.dataset.runId === id);
  $('#run-empty').hidden = true;
  $('#run-body').hidden = false;
  $('#run-title').replaceChildren(el('span', {class: 'mono'}, id));
  setRunState('');
  $('#run-times').textContent = '';
  $('#graph').replaceChildren(el('div', {class: 'message'}, 'Loading…'));
  $('#nodes tbody').replaceChildren();
  $('#events').replaceChildren();
  $('#run-error').hidden = true;
  $('#run-result-box').hidden = true;
  refreshRun(id);
  followEvents(id);
  if (!state.runs.some((r) => r.id === id)) pollRuns();  // a new run: the list shows it at once
}

function setRunState(s) {
  const e = $('#run-state');
  e.textContent = s || '…';
  e.dataset.state = s;
  const li = $(`#runs li[data-run-id="${CSS.escape(state.selected || '')}"]`);
  if (li && s && li.dataset.state !== s) {
    li.dataset.state = s;
    li.querySelector('.badge').replaceWith(badge(s));
  }
}

// The run's JSON and graph again, at most every REFRESH_MIN_MS (or `gap` ms).
function scheduleRefresh(gap = 0) {
  if (state.refreshTimer) return;
  const wait = Math.max(0, state.lastRefresh + Math.max(state.refreshGap, gap) - performance.now());
  state.refreshTimer = setTimeout(() => {
    state.refreshTimer = 0;
    if (state.selected) refreshRun(state.selected);
  }, wait);
}

async function refreshRun(id) {
  const seq = ++state.refreshSeq;
  const start = state.lastRefresh = performance.now();
  const [run, graph] = await Promise.allSettled([getJson(`v1/runs/${enc(id)}`), fetchGraph(id)]);
  if (id !== state.selected || seq < state.renderedSeq) return;  // another run, or a newer answer
  state.renderedSeq = seq;
  setTimeout(() => {  // after the rendering below: a refresh takes at most a third of the time
    state.refreshGap = Math.max(REFRESH_MIN_MS, 3 * (performance.now() - start));
  });
  if (run.status === 'fulfilled') {
    state.run = run.value;
    report('run', null);
    try { renderRun(run.value); } catch (e) { report('run', new Error('cannot show the run: ' + e.message)); }
  } else report('run', run.reason);
  if (graph.status === 'fulfilled') {
    report('graph', null);
    renderGraph(graph.value);
  } else {
    report('graph', graph.reason);
    if (!$('#graph svg')) $('#graph').replaceChildren(el('div', {class: 'message'}, 'The graph cannot be loaded.'));
  }
}

// {svg: TEXT}, or {message} when there is no graph: the server cannot draw
// graphs (501: no Graphviz), or the run is not in its memory (404: a run of an
// earlier server, of which the store keeps a summary).
async function fetchGraph(id) {
  if (state.graphMissing) return {message: 'No graph: ' + state.graphMissing};
  try {
    return {svg: await (await api(`v1/runs/${enc(id)}/graph`)).text()};
  } catch (e) {
    if (e.status === 404) return {message: 'No graph: the run is not in the server\'s memory (the store keeps its summary).'};
    if (e.status !== 501) throw e;
    state.graphMissing = e.message.replace(/^[^ ]+: 501 /, '');
    return {message: 'No graph: ' + state.graphMissing};
  }
}

function renderRun(run) {
  $('#run-title').replaceChildren(el('span', {class: 'mono'}, run.id), ' · ' + runMeta(run));
  setRunState(run.state);
  let times = run.created_unix ? 'created ' + new Date(run.created_unix * 1000).toLocaleString() : '';
  if (run.finished_unix && run.created_unix) times += `, took ${(run.finished_unix - run.created_unix).toFixed(2)} s`;
  $('#run-times').textContent = times;

  const nodes = Array.isArray(run.nodes) ? [...run.nodes].sort((a, b) => a.id - b.id) : [];
  $('#nodes tbody').replaceChildren(...nodes.map(nodeRow));
  if (!nodes.length) {
    // A run only in the store has its totals instead of nodes.
    const text = Array.isArray(run.nodes) ? 'No nodes yet.'
      : `The store's summary: ${fmt(run.nodes_done)} nodes done, ${fmt(run.nodes_failed)} failed; ` +
        `tokens ${fmt(run.prompt_tokens)} in (${fmt(run.cached_tokens)} cached), ${fmt(run.generated_tokens)} out.`;
    $('#nodes tbody').append(el('tr', {}, el('td', {colspan: 8, class: 'placeholder'}, text)));
  }

  $('#run-error').hidden = !run.error;
  $('#run-error').textContent = run.error ? 'Error: ' + run.error : '';
  const hasResult = run.result !== undefined && run.result !== null;
  $('#run-result-box').hidden = !hasResult;
  $('#run-result').textContent = !hasResult ? '' : typeof run.result === 'string' ? run.result : JSON.stringify(run.result, null, 2);
}

function nodeRow(n) {
  const tokens = n.label === 'join' ? '–' : [n.prompt_tokens, n.cached_tokens, n.generated_tokens].map((v) => fmt(v)).join(' / ');
  const times = [n.queued_ms, n.start_ms, n.first_token_ms, n.end_ms].map(fmtMs).join(' / ');
  return el('tr', {'data-node-id': n.id, 'data-state': n.state},
    el('td', {class: 'name'}, `${n.label || 'node'}#${n.id}`),
    el('td', {}, badge(n.state)),
    el('td', {}, n.goal || '–'),
    el('td', {}, n.group ? String(n.group) : '–'),
    el('td', {}, n.engine || '–'),
    el('td', {class: 'num'}, tokens),
    el('td', {class: 'num'}, times),
    outputCell(n));
}

// A node's outputs as "name = text" lines: the run JSON's values, else the
// text streamed by token events so far.
function outputCell(n) {
  const td = el('td', {class: 'output'});
  const lines = [];
  const outs = n.outputs && typeof n.outputs === 'object' ? n.outputs : {};
  for (const [name, text] of Object.entries(outs)) if (text) lines.push([name, String(text)]);
  const live = state.live.get(n.id);
  for (const [v, text] of live || []) {
    const x = state.run && Array.isArray(state.run.vars) && state.run.vars.find((y) => y.id === v);
    const name = x ? x.name : 'var ' + v;
    if (!lines.some(([k]) => k === name)) lines.push([name, text]);
  }
  const full = lines.map(([k, t]) => `${k} = ${t}`).join('\n');
  if (full.length > OUTPUT_CHARS) td.title = truncate(full, 4000);
  let room = OUTPUT_CHARS;
  lines.forEach(([k, t], i) => {
    if (room <= 0) return;
    td.append(i ? '\n' : '', el('span', {class: 'var'}, k + ' = '), truncate(t, room));
    room -= t.length;
  });
  if (n.error) td.append(lines.length ? '\n' : '', el('span', {class: 'error'}, truncate(String(n.error), OUTPUT_CHARS)));
  return td;
}

// The server's SVG, inline: scripts and event attributes dropped (it is our
// own server's Graphviz output, but it carries the programs' text), each node
// given data-node-id and data-state from the run JSON (and its label made to
// say that state). Fitted to the panel, or shown as the user zoomed it.
function renderGraph(graph) {
  const box = $('#graph');
  const message = (m) => {
    box.style.height = '';
    $('#graph-tools').hidden = true;
    box.replaceChildren(el('div', {class: 'message'}, m));
  };
  if (graph.svg == null) return message(graph.message || 'No graph.');
  const doc = new DOMParser().parseFromString(graph.svg, 'image/svg+xml');
  const svg = doc.documentElement;
  if (!svg || svg.localName !== 'svg' || doc.querySelector('parsererror')) return message('The graph cannot be read.');
  for (const bad of svg.querySelectorAll('script, style, foreignObject, iframe')) bad.remove();
  for (const e of svg.querySelectorAll('*')) {
    for (const a of [...e.attributes]) {
      if (/^on/i.test(a.name) || (/href$/i.test(a.name) && !a.value.startsWith('#'))) e.removeAttribute(a.name);
    }
  }
  // The drawing's extent in Graphviz points (its viewBox); the SVG itself
  // fills the panel and shows the part of it that fitGraph or the user chose.
  const [x, y, w, h] = (svg.getAttribute('viewBox') || '').split(/[\s,]+/).map(Number);
  if (!(w > 0 && h > 0)) return message('The graph cannot be read.');
  Object.assign(svg.dataset, {x, y, w, h});
  svg.removeAttribute('width');
  svg.removeAttribute('height');
  const nodes = new Map(((state.run && state.run.nodes) || []).map((n) => [String(n.id), n]));
  for (const g of svg.querySelectorAll('g.node')) {
    const m = /^n(\d+)$/.exec(((g.querySelector('title') || {}).textContent || '').trim());
    if (!m) continue;
    const n = nodes.get(m[1]);
    g.setAttribute('data-node-id', m[1]);
    g.setAttribute('data-state', n ? n.state : 'unknown');
    if (n) relabelGraphNode(g, n);  // the JSON may be newer than the drawing
  }
  box.replaceChildren(document.importNode(svg, true));
  $('#graph-tools').hidden = false;
  if (state.graphView) setView(graphSvg(), state.graphView); else fitGraph();
}

// A node's box says `n.state` at once (a node event's or the run JSON's),
// before the graph is drawn again: the state that starts its second line
// ("running, latency" -> "done, latency") and, once it ended, its end time
// ("31- ms on engine0" -> "31-1399 ms on engine0").
function relabelGraphNode(g, n) {
  const lines = [...g.querySelectorAll('text')];
  const st = lines.find((t) => /^(waiting|ready|running|done|failed|cancelled)\b/.test(t.textContent));
  if (st && n.state) st.textContent = st.textContent.replace(/^\w+/, n.state);
  const times = lines.find((t) => /^\d+-\d* ms\b/.test(t.textContent));
  if (times && n.end_ms != null) times.textContent = times.textContent.replace(/^(\d+)-\d*/, '$1-' + Math.round(n.end_ms));
}

// ---- The graph's view: fitted to the panel, zoomed (wheel, buttons) and
// moved (drag). The SVG fills #graph; its viewBox is the part of the drawing
// shown, in Graphviz points. state.graphView is that part once the user
// zoomed or dragged (kept when the graph is drawn again), null while fitted.

const graphSvg = () => $('#graph svg[data-w]');
const viewOf = (svg) => {
  const b = svg.viewBox.baseVal;
  return {x: b.x, y: b.y, w: b.width, h: b.height};
};
function setView(svg, v) {
  if (svg) svg.setAttribute('viewBox', [v.x, v.y, v.w, v.h].map((n) => n.toFixed(2)).join(' '));
}
// Graphviz points per pixel on screen (the view is scaled to fit the SVG's box).
function pointsPerPx(svg, v) {
  const r = svg.getBoundingClientRect();
  return Math.max(v.w / r.width, v.h / r.height);
}

// The whole drawing in the panel, centred, never above its natural size. The
// panel is as tall as the drawing scaled to the panel's width, at most
// GRAPH_MAX_HEIGHT of the window: a tall graph (a wide fan-in) is scaled down
// until it fits.
function fitGraph() {
  const svg = graphSvg();
  const box = $('#graph');
  if (!svg || !box.clientWidth) return;  // not laid out (hidden)
  const [x, y, w, h] = ['x', 'y', 'w', 'h'].map((k) => Number(svg.dataset[k]));
  const scaled = h * Math.min(1, box.clientWidth / w);
  const most = Math.max(300, GRAPH_MAX_HEIGHT * window.innerHeight);
  box.style.height = Math.ceil(Math.max(60, Math.min(most, scaled + 2))) + 'px';
  const W = box.clientWidth, H = box.clientHeight;
  const s = Math.min(W / w, H / h, 1);
  setView(svg, {x: x + (w - W / s) / 2, y: y + (h - H / s) / 2, w: W / s, h: H / s});
}

// Zooms by `f` (> 1: closer) about the point (cx, cy) of the window, which
// stays where it is; the panel's centre without one.
function zoomGraph(f, cx, cy) {
  const svg = graphSvg();
  if (!svg) return;
  const v = viewOf(svg), r = svg.getBoundingClientRect(), k = pointsPerPx(svg, v);
  f = Math.min(Math.max(f, k * ZOOM_MIN), k * ZOOM_MAX);  // the scale 1/k becomes f/k
  if (cx == null) [cx, cy] = [r.left + r.width / 2, r.top + r.height / 2];
  // The drawing's point under (cx, cy), and the view's centre moved towards it.
  const px = v.x + v.w / 2 + (cx - r.left - r.width / 2) * k;
  const py = v.y + v.h / 2 + (cy - r.top - r.height / 2) * k;
  const w = v.w / f, h = v.h / f;
  const mx = px + (v.x + v.w / 2 - px) / f, my = py + (v.y + v.h / 2 - py) / f;
  state.graphView = {x: mx - w / 2, y: my - h / 2, w, h};
  setView(svg, state.graphView);
}

// A drag moves the drawing with the pointer.
function dragGraph(e) {
  const svg = graphSvg();
  if (!svg || e.button !== 0) return;
  const box = $('#graph');
  const v = viewOf(svg), k = pointsPerPx(svg, v), x0 = e.clientX, y0 = e.clientY;
  const move = (m) => {
    state.graphView = {...v, x: v.x - (m.clientX - x0) * k, y: v.y - (m.clientY - y0) * k};
    setView(graphSvg(), state.graphView);
  };
  const end = () => {
    box.classList.remove('dragging');
    box.removeEventListener('pointermove', move);
    box.removeEventListener('pointerup', end);
    box.removeEventListener('pointercancel', end);
  };
  e.preventDefault();
  box.setPointerCapture(e.pointerId);
  box.classList.add('dragging');
  box.addEventListener('pointermove', move);
  box.addEventListener('pointerup', end);
  box.addEventListener('pointercancel', end);
}

// ---- The selected run's events (server-sent events read with fetch: an
// EventSource cannot send the Authorization header) ----

async function followEvents(id) {
  const ctl = new AbortController();
  state.stream = ctl;
  try {
    const res = await api(`v1/runs/${enc(id)}/events`, {signal: ctl.signal, headers: {Accept: 'text/event-stream'}});
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      // Events are separated by a blank line.
      let m;
      while ((m = /\r?\n\r?\n/.exec(buf))) {
        const block = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        onEventBlock(id, block);
      }
    }
    report('events', null);
  } catch (e) {
    if (e.name === 'AbortError' || ctl.signal.aborted) return;
    if (e.status === 401) return;  // resume() starts it again
    if (e.status === 404) return;  // a run of an earlier server: no events
    if (state.selected === id) report('events', e);
  }
  if (ctl.signal.aborted || state.selected !== id) return;
  state.stream = null;
  clearTimeout(state.refreshTimer);
  state.refreshTimer = 0;
  await refreshRun(id);  // always once at the end
  // The stream ends with the run; one that broke off early is followed again.
  if (state.selected === id && state.run && !TERMINAL.has(state.run.state)) {
    setTimeout(() => {
      if (state.selected === id && !state.stream && !state.needKey) followEvents(id);
    }, 2000);
  }
}

function onEventBlock(id, block) {
  const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5)).join('\n');
  if (!data || data === '[DONE]' || state.selected !== id) return;
  try {
    onEvent(JSON.parse(data));
  } catch (e) { report('events', new Error(`cannot show the event ${truncate(data, 80)}: ${e.message}`)); }
}

function onEvent(ev) {
  if (ev.type === 'tokens') {
    const node = Number(ev.node);
    if (!state.live.has(node)) state.live.set(node, new Map());
    const vars = state.live.get(node);
    vars.set(ev.var, (vars.get(ev.var) || '') + (ev.text || ''));
    const row = $(`#nodes tr[data-node-id="${node}"]`);
    const n = state.run && (state.run.nodes || []).find((x) => x.id === node);
    if (row) row.lastElementChild.replaceWith(outputCell(n || {id: node}));
    // Token counts and first-token times move too: fetched again now and then.
    scheduleRefresh(row ? TOKENS_REFRESH_MS : 0);
  } else if (ev.type === 'node') {
    // {node, label, state, start_ms?, end_ms?, error?}
    const node = String(ev.node);
    for (const e of document.querySelectorAll(`#nodes tr[data-node-id="${node}"], #graph g.node[data-node-id="${node}"]`)) {
      e.setAttribute('data-state', ev.state);
    }
    const g = $(`#graph g.node[data-node-id="${node}"]`);
    if (g) relabelGraphNode(g, ev);
    const badgeEl = $(`#nodes tr[data-node-id="${node}"] .badge`);
    if (badgeEl) badgeEl.replaceWith(badge(ev.state));
    const n = state.run && (state.run.nodes || []).find((x) => String(x.id) === node);
    const label = ev.label || (n ? n.label : 'node');
    logEvent(`${label}#${node} ${ev.state}${ev.error ? ': ' + ev.error : ''}`, ev.state === 'failed' ? 'failed' : '');
    scheduleRefresh();
  } else if (ev.type === 'run') {
    setRunState(ev.state);
    logEvent(`run ${ev.state}${ev.error ? ': ' + ev.error : ''}`, ev.state === 'failed' ? 'failed' : '');
    scheduleRefresh();
  } else if (ev.type === 'log') {
    logEvent(String(ev.text), 'log');
  }
}

function logEvent(text, cls) {
  const ol = $('#events');
  const lines = text.split('\n');  // a Lua error's traceback: #run-error has it
  text = truncate(lines[0], 300) + (lines.length > 1 ? ' …' : '');
  const atEnd = ol.scrollTop + ol.clientHeight >= ol.scrollHeight - 4;
  ol.append(el('li', {class: cls || null}, el('span', {class: 't'}, clock()), text));
  while (ol.children.length > MAX_EVENTS) ol.firstElementChild.remove();
  if (atEnd) ol.scrollTop = ol.scrollHeight;
}

// ---- Engines and clients (/v1/stats) ----

async function pollStats() {
  try {
    const since = state.stats ? '?since=' + state.statsSeq : '';
    const j = await getJson('v1/stats' + since);
    const engines = Array.isArray(j.engines) ? j.engines : [];
    const names = (list) => list.map((e) => e.name).join('\n');
    // First answer, a restarted server (its seq went back) or other engines: start over.
    if (!state.stats || j.seq < state.statsSeq || names(engines) !== names(state.stats.engines)) {
      state.stats = {model: j.model, engines, samples: []};
      state.statsSeq = 0;
      buildEngines(engines);
    }
    state.stats.model = j.model;
    const fresh = (j.samples || []).filter((x) => x.seq > state.statsSeq);  // oldest first
    state.stats.samples.push(...fresh);
    if (fresh.length) state.statsSeq = fresh[fresh.length - 1].seq;
    if (state.stats.samples.length > MAX_SAMPLES) state.stats.samples.splice(0, state.stats.samples.length - MAX_SAMPLES);
    report('stats', null);
    renderStats();
    renderHeader();
  } catch (e) { report('stats', e); }
}

const METRICS = ['tokens_per_s', 'running_waiting', 'kv_used', 'prefix_hit'];

function buildEngines(engines) {
  const box = $('#engines');
  box.replaceChildren(...engines.map((e) => {
    const where = [e.device, e.model ? e.model.split('/').pop() : ''].filter(Boolean).join(' · ');
    return el('div', {class: 'engine', 'data-engine': e.name},
      el('h3', {}, e.name + ' ', el('span', {class: 'where', title: e.model || null}, where)),
      el('div', {class: 'charts'}, ...METRICS.map((metric) =>
        svgEl('svg', {class: 'chart', 'data-metric': metric, viewBox: `0 0 ${CW} ${CH}`, role: 'img'}))));
  }));
  if (!engines.length) box.append(el('div', {class: 'placeholder'}, 'No engines.'));
}

function renderStats() {
  const {engines, samples} = state.stats;
  const last = samples[samples.length - 1];
  const span = last ? Math.min(600, Math.max(60, last.t_unix - samples[0].t_unix)) : 60;
  $('#stats-note').textContent = last ? `(last ${Math.round(span / 60)} min)` : '(no samples yet)';
  engines.forEach((eng, i) => {
    const box = $(`#engines .engine[data-engine="${CSS.escape(eng.name)}"]`);
    if (!box) return;
    // [t, value] per sample of this engine (null: none).
    const series = (f) => samples.map((s) => {
      const v = s.engines && s.engines[i] ? f(s.engines[i]) : null;
      return [s.t_unix, v != null && Number.isFinite(v) ? v : null];
    });
    const cur = last && last.engines && last.engines[i] ? last.engines[i] : {};
    const kv = (e) => (e.kv_blocks_total ? (100 * e.kv_blocks_used) / e.kv_blocks_total : null);
    const hit = (e) => (e.prefix_hit_rate == null ? null : 100 * e.prefix_hit_rate);
    const chart = (m) => box.querySelector(`svg.chart[data-metric="${m}"]`);
    drawChart(chart('tokens_per_s'), 'tokens/s', span, null,
      [series((e) => e.generated_tokens_per_s), series((e) => e.prompt_tokens_per_s)],
      [fmt(cur.generated_tokens_per_s, true) + ' out', fmt(cur.prompt_tokens_per_s, true) + ' in']);
    drawChart(chart('running_waiting'), 'requests', span, null,
      [series((e) => e.running), series((e) => e.waiting)],
      [fmt(cur.running) + ' running', fmt(cur.waiting) + ' waiting']);
    drawChart(chart('kv_used'), 'KV blocks used', span, 100, [series(kv)],
      [`${pct(kv(cur))} of ${fmt(cur.kv_blocks_total)}`]);
    drawChart(chart('prefix_hit'), 'prefix cache hits', span, 100, [series(hit)], [pct(hit(cur))]);
  });
  renderClients(samples);
}

// A chart: a label, the current values (one per series, in its colour), the
// series over the last `span` seconds, y from 0 to `max` (null: the data's).
// A series is [t, value] pairs, null where there is no value (the prefix hit
// rate of an interval without prompts): a polyline per stretch without one,
// each with data-points, a dot for a lone point.
const CW = 200, CH = 78, TOP = 24, BOTTOM = 4;
function drawChart(svg, label, span, max, series, values) {
  if (!svg) return;
  const known = series.flat().filter(([, v]) => v != null);
  const tEnd = Math.max(0, ...series.flat().map(([t]) => t));
  const top = max || niceMax(Math.max(0, ...known.map(([, v]) => v)));
  const x = (t) => (CW * (1 - (tEnd - t) / span)).toFixed(1);
  const y = (v) => (CH - BOTTOM - (Math.min(v, top) / top) * (CH - TOP - BOTTOM)).toFixed(1);
  const lines = [];
  series.forEach((pts, k) => {
    const stretches = [[]];
    for (const p of pts) {
      if (p[1] != null) stretches[stretches.length - 1].push(p);
      else if (stretches[stretches.length - 1].length) stretches.push([]);
    }
    for (const st of stretches) {
      if (!st.length && lines.length) continue;  // an empty series still gets its polyline
      lines.push(svgEl('polyline', {class: 's' + (k + 1), 'data-points': st.length,
                                    points: st.map(([t, v]) => `${x(t)},${y(v)}`).join(' ')}));
      if (st.length === 1) lines.push(svgEl('circle', {class: 's' + (k + 1), cx: x(st[0][0]), cy: y(st[0][1]), r: 1.5}));
    }
  });
  svg.replaceChildren(
    svgEl('line', {class: 'grid', x1: 0, x2: CW, y1: TOP, y2: TOP}),
    svgEl('line', {class: 'grid', x1: 0, x2: CW, y1: CH - BOTTOM, y2: CH - BOTTOM}),
    svgEl('text', {class: 'label', x: 4, y: 10}, label),
    svgEl('text', {class: 'label', x: CW - 4, y: TOP - 2, 'text-anchor': 'end'}, max === 100 ? '100%' : fmt(top, true)),
    svgEl('text', {class: 'value', x: 4, y: TOP - 3},
      ...values.map((v, k) => svgEl('tspan', {class: 's' + (k + 1)}, (k ? '  ' : '') + v))),
    ...lines);
}
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

// One row per client (summed over engines), with its generated tok/s sparkline.
function renderClients(samples) {
  const last = samples[samples.length - 1];
  const rows = new Map();
  for (const c of (last && last.clients) || []) {
    const name = c.client || '';
    const r = rows.get(name) || {counters: []};
    for (const k of ['prompt_tokens', 'generated_tokens', 'running', 'waiting', 'generated_tokens_per_s']) r[k] = (r[k] || 0) + (c[k] || 0);
    r.counters.push([c.engine, c.counter]);
    rows.set(name, r);
  }
  const multi = state.stats.engines.length > 1;
  const body = [...rows.keys()].sort().map((name) => {
    const r = rows.get(name);
    const counter = r.counters.map(([e, v]) => (multi ? `${e}: ` : '') + fmt(v, true)).join(', ');
    const num = (col, v) => el('td', {class: 'num', 'data-col': col}, v);
    return el('tr', {'data-client': name},
      el('td', {title: name || null}, name ? shortId(name) : '(no key)'),
      ...['prompt_tokens', 'generated_tokens', 'running', 'waiting'].map((k) => num(k, fmt(r[k]))),
      num('counter', counter),
      el('td', {class: 'rate'}, sparkline(samples, name), el('span', {}, fmt(r.generated_tokens_per_s, true))));
  });
  if (!body.length) body.push(el('tr', {class: 'empty'}, el('td', {colspan: 7}, 'No clients yet.')));
  $('#clients tbody').replaceChildren(...body);
}

function sparkline(samples, name) {
  const W = 80, H = 18;
  const vals = samples.map((s) => (s.clients || []).filter((c) => (c.client || '') === name)
    .reduce((a, c) => a + (c.generated_tokens_per_s || 0), 0));
  const top = niceMax(Math.max(0, ...vals));
  const n = Math.max(vals.length - 1, 1);
  const pts = vals.map((v, i) => `${((W * i) / n).toFixed(1)},${(H - 1 - (v / top) * (H - 2)).toFixed(1)}`);
  const cur = vals.length ? vals[vals.length - 1] : 0;
  return svgEl('svg', {class: 'spark', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none'},
    svgEl('title', {}, `${fmt(cur, true)} tok/s now, scale 0–${fmt(top, true)}`),
    svgEl('polyline', {'data-points': pts.length, points: pts.join(' ')}));
}

// ---- Start ----

function init() {
  window.addEventListener('error', (e) => report('page', new Error(e.message)));
  window.addEventListener('unhandledrejection', (e) => report('page', e.reason instanceof Error ? e.reason : new Error(String(e.reason))));
  takeKeyFromHash();
  $('#forget-key').hidden = !getKey();

  $('#auth').addEventListener('submit', (e) => {
    e.preventDefault();
    const k = $('#auth-key').value.trim();
    if (!k) return;
    setKey(k);
    $('#auth-key').value = '';
    resume();
  });
  $('#forget-key').addEventListener('click', () => {
    setKey('');
    resume();  // without a key the next request asks for one
  });
  const graph = $('#graph');
  graph.addEventListener('pointerdown', dragGraph);
  graph.addEventListener('wheel', (e) => {
    if (!graphSvg()) return;
    e.preventDefault();  // the wheel zooms the graph rather than scrolling the page
    const px = e.deltaY * (e.deltaMode === 1 ? 40 : e.deltaMode === 2 ? 800 : 1);  // lines, pages
    zoomGraph(Math.exp(-px / 500), e.clientX, e.clientY);
  }, {passive: false});
  $('#graph-tools').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-zoom]');
    if (!b) return;
    if (b.dataset.zoom === 'fit') {
      state.graphView = null;
      fitGraph();
    } else zoomGraph(b.dataset.zoom === 'in' ? ZOOM_STEP : 1 / ZOOM_STEP);
  });
  window.addEventListener('resize', () => { if (!state.graphView) fitGraph(); });
  $('#runs').addEventListener('click', (e) => {
    const li = e.target.closest('li[data-run-id]');
    if (li) location.hash = 'run=' + enc(li.dataset.runId);  // hashchange selects it
  });
  window.addEventListener('hashchange', () => {
    if (takeKeyFromHash()) resume();
    const {run} = readHash();
    if (run) selectRun(run);
  });

  loop(pollRuns, RUNS_EVERY_MS);
  loop(pollStats, STATS_EVERY_MS);
  const {run} = readHash();
  if (run) selectRun(run);
}

init();
