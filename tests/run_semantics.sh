#!/usr/bin/env bash
# How `braid run` executes programs as people write them, end to end on the
# bundled model, checked on --json output (no timing thresholds):
#   - a get-per-item loop: calls made before the first get overlap in the
#     engine (the second starts before the first ends);
#   - a call made after reading a value has a read-before edge to it;
#   - work left when main returns is finished (--on-return wait) or named in
#     a warning (--on-return cancel);
#   - a missed deadline is reported, and --strict-deadlines exits 3;
#   - run bookkeeping: a syntax error records no run (and loads no model), an
#     error prints the resume hint, a Ctrl-C'd run reads "interrupted".
# Usage: run_semantics.sh BRAID_BINARY MODEL_PATH
set -u
braid=$1
model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run() { "$braid" run -m "$model" -t "${BRAID_TEST_THREADS:-2}" --db none -q "$@"; }

cat >"$tmp/getloop.lua" <<'LUA'
local f = braid.fn [[Count from {{x}}: {{gen y max_tokens=24}}]]
return function()
  local a = f{ x = "one" }.y
  local b = f{ x = "ten" }.y
  local first = a:get()
  local c = f{ x = "twenty " .. first }.y
  return { first, b:get(), c:get() }
end
LUA
if ! run --json "$tmp/getloop.lua" >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: getloop: $(tail -n 3 "$tmp/err")"; fail=1
elif ! python3 - "$tmp/out" <<'PY'
import json, sys
n = {x["id"]: x for x in json.load(open(sys.argv[1]))["nodes"]}
assert n[2]["start_ms"] < n[1]["end_ms"], f"the second call started after the first ended: {n[2]['start_ms']} >= {n[1]['end_ms']}"
assert [r["producer"] for r in n[3]["read_before"]] == [1], n[3]["read_before"]
assert n[1]["read_before"] == [] and n[2]["read_before"] == []
PY
then
  echo "FAIL: getloop: $(cat "$tmp/out" | head -c 600)"; fail=1
else
  echo "ok   get-per-item calls overlap; read-before edge recorded"
fi

cat >"$tmp/leftover.lua" <<'LUA'
local f = braid.fn [[Say {{x}}: {{gen y max_tokens=4}}]]
return function()
  braid.spawn(function() braid.log("child got " .. f{ x = "hi" }.y:get()) end)
  local unread = f{ x = "nobody reads this" }.y
  return "main done"
end
LUA
if ! run "$tmp/leftover.lua" >"$tmp/out" 2>"$tmp/err" || ! grep -q "child got" "$tmp/err" ||
  grep -q "warning" "$tmp/err"; then
  echo "FAIL: --on-return wait: $(cat "$tmp/err")"; fail=1
else
  echo "ok   --on-return wait finishes what main left"
fi
if ! run --on-return cancel "$tmp/leftover.lua" >"$tmp/out" 2>"$tmp/err" ||
  ! grep -q "warning: the program returned with work pending; cancelled: coroutine main/1" "$tmp/err"; then
  echo "FAIL: --on-return cancel: $(cat "$tmp/err")"; fail=1
else
  echo "ok   --on-return cancel names what it drops: $(grep -o 'cancelled: .*' "$tmp/err")"
fi

cat >"$tmp/deadline.lua" <<'LUA'
local f = braid.fn [[Write a long story about {{x}}: {{gen y max_tokens=64}}]]
return function() return f{ x = "a dragon" }.y:get{ deadline_ms = 1 } end
LUA
run "$tmp/deadline.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 0 ] || ! grep -q "missed its deadline" "$tmp/err"; then
  echo "FAIL: a missed deadline without --strict-deadlines: rc $rc, $(cat "$tmp/err")"; fail=1
fi
run --strict-deadlines --json "$tmp/deadline.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 3 ] || ! python3 -c "
import json, sys
n = json.load(open('$tmp/out'))['nodes'][0]
assert n['deadline_met'] is False and n['deadline_ms'] > 0 and 'slack_ms' in n, n" 2>/dev/null; then
  echo "FAIL: --strict-deadlines: rc $rc, $(cat "$tmp/err")"; fail=1
else
  echo "ok   missed deadline: $(grep -o 'missed its deadline.*' "$tmp/err" | head -n 1); exit 3"
fi

db="$tmp/runs.db"
printf 'local x = = 1\n' >"$tmp/syntax.lua"
"$braid" run -m /nonexistent.gguf --db "$db" "$tmp/syntax.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
runs=$("$braid" runs --db "$db" --json 2>/dev/null | python3 -c "import json,sys; print(len(json.load(sys.stdin)))" 2>/dev/null || echo 0)
if [ $rc != 1 ] || ! grep -q "syntax.lua:1: unexpected symbol near '='" "$tmp/err" || [ "$runs" != 0 ]; then
  echo "FAIL: a syntax error: rc $rc, $runs runs recorded, $(cat "$tmp/err")"; fail=1
else
  echo "ok   a syntax error fails before the model loads; no run recorded"
fi
cat >"$tmp/error.lua" <<'LUA'
local f = braid.fn [[Say {{x}}: {{gen y max_tokens=2}}]]
local a = f{ x = "hi" }.y
local b = f{ x = "ho" }.y
local both = braid.join({ a, b }, " "):get()
error("after the calls")
LUA
"$braid" run -m "$model" -t "${BRAID_TEST_THREADS:-2}" --db "$db" "$tmp/error.lua" >"$tmp/out" 2>"$tmp/err"
id=$(grep -o 'braid: run run-[^ ]*' "$tmp/err" | head -n 1 | cut -d' ' -f3)
stored=$("$braid" runs --db "$db" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['nodes_done'])")
if ! grep -q "resume with: braid run --resume run-" "$tmp/err"; then
  echo "FAIL: no resume hint after an error: $(cat "$tmp/err")"; fail=1
elif ! grep -q "run $id: 2 calls and 1 other node (joins, host values)" "$tmp/err" || [ "$stored" != 2 ]; then
  echo "FAIL: the summary's calls and braid runs' ($stored) differ: $(grep "^run " "$tmp/err")"; fail=1
else
  echo "ok   an error prints the resume hint; the summary counts calls as braid runs does"
fi
cat >"$tmp/long.lua" <<'LUA'
local f = braid.fn [[Count: {{gen y max_tokens=3000}}]]
braid.log("started")
return f{}.y:get()
LUA
"$braid" run -m "$model" -t "${BRAID_TEST_THREADS:-2}" --db "$db" "$tmp/long.lua" >"$tmp/out" 2>"$tmp/err" &
pid=$!
deadline=$(($(date +%s) + 120))
while ! grep -q 'started' "$tmp/err" && kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
  sleep 0.1
done
kill -INT "$pid"
wait "$pid"
rc=$?
state=$("$braid" runs --db "$db" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['state'])")
if [ $rc != 130 ] || [ "$state" != interrupted ]; then
  echo "FAIL: Ctrl-C: rc $rc, braid runs says '$state'"; fail=1
else
  echo "ok   a Ctrl-C'd run reads interrupted"
fi

[ $fail = 0 ] && echo "run semantics: ok"
exit $fail
