#!/usr/bin/env bash
# How `braid run` executes programs as people write them, end to end on the
# bundled model, checked on --json output (no timing thresholds):
#   - a get-per-item loop: calls made before the first get overlap in the
#     engine (the second starts before the first ends);
#   - a call made after reading a value has a read-before edge to it;
#   - work left when main returns is finished (--on-return wait) or named in
#     a warning (--on-return cancel);
#   - a missed deadline is reported, and --strict-deadlines exits 3.
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

[ $fail = 0 ] && echo "run semantics: ok"
exit $fail
