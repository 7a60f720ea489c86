#!/usr/bin/env bash
# Every example app end to end with `braid run` on the bundled model: exit 0,
# non-empty output, and each app's own structure (checked in Python on its
# JSON result). Then bad programs: each must fail with a non-zero exit and an
# error that names FILE:LINE.
# Usage: apps_test.sh BRAID_BINARY MODEL_PATH [APP...]
# (default: the fast apps; tree_summary, minutes on 2 threads, runs by name only,
# on its small bundled sample)
# Exit: 0 all passed; 1 a failure; 77 nothing failed but some app was skipped
# because the engine lacks a feature it needs (reported as SKIP).
set -u
braid=$1
model=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
apps=("$@")
[ ${#apps[@]} = 0 ] && apps=(map_reduce chain doc_chat react voting multi_agent debate extract_verify)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
skip=0
threads=${BRAID_TEST_THREADS:-2}

args_for() {  # small sizes, to keep the test fast
  case "$1" in
    debate) echo "1" ;;          # rounds
    extract_verify) echo "4" ;;  # reviews
    *) echo "" ;;
  esac
}

check() {  # check APP ARGS: structural checks on $tmp/out (JSON)
  python3 - "$1" "$tmp/out" "$root" "$2" <<'PY'
import json, sys
app, path, root, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
r = json.load(open(path))
def nonempty(s, what):
    assert isinstance(s, str) and s.strip(), f"{what} is empty: {s!r}"
if app == "map_reduce":
    assert r["chunks"] >= 2, r["chunks"]
    assert len(r["summaries"]) == r["chunks"], "one summary per chunk"
    for i, s in enumerate(r["summaries"]): nonempty(s, f"summary {i+1}")
    nonempty(r["abstract"], "abstract")
elif app == "chain":
    assert len(r["steps"]) >= 2, "at least two chain steps"
    for i, s in enumerate(r["steps"]): nonempty(s, f"step {i+1}")
    assert r["final"] == r["steps"][-1], "final is the last step"
elif app == "doc_chat":
    qs = [l for l in open(f"{root}/apps/doc_chat/questions.txt").read().split("\n") if l]
    assert [a["question"] for a in r["answers"]] == qs, "one answer per question, in order"
    for a in r["answers"]: nonempty(a["answer"], a["question"])
elif app == "react":
    nonempty(r["answer"], "answer")
    assert 1 <= len(r["steps"]) <= 3, "1..3 steps"
    for s in r["steps"]:
        nonempty(s["output"], "step output")
        if "tool" in s:
            assert s["tool"] in ("lookup", "calculator"), s["tool"]
            nonempty(s["observation"], "observation")
elif app == "voting":
    assert len(r["votes"]) == 3, r["votes"]
    for v in r["votes"]: assert v in r["choices"], f"vote {v!r} not among the choices"
    assert r["answer"] in r["votes"], "the answer is the majority vote"
elif app == "multi_agent":
    nonempty(r["plan"], "plan")
    assert 1 <= len(r["rounds"]) <= 2, "1..2 rounds"
    for rd in r["rounds"]:
        assert len(rd) == 4, "one result per coder"
        for x in rd:
            nonempty(x["code"], "code"); nonempty(x["review"], "review")
            assert x["verdict"] in ("approve", "revise"), x["verdict"]
elif app == "debate":
    rounds = int(args[0]) if args else 3
    n = 2 * rounds  # both sides speak every round
    nonempty(r["motion"], "motion")
    assert len(r["turns"]) == n, f"{n} turns"
    for i, t in enumerate(r["turns"]):
        assert t["side"] == ("pro" if i % 2 == 0 else "con"), "pro, then con, every round"
        assert t["round"] == i // 2 + 1, t
        nonempty(t["text"], f"turn {i+1}")
    assert [c["turn"] for c in r["fact_checks"]] == list(range(1, n + 1)), "one fact check per turn"
    for c in r["fact_checks"]:
        nonempty(c["note"], f"fact check {c['turn']}")
        assert c["rating"] in ("yes", "no"), c["rating"]
    assert r["verdict"] in ("pro", "con"), r["verdict"]
elif app == "extract_verify":
    n = int(args[0]) if args else 12
    assert len(r["items"]) == n, f"{n} items"
    for it in r["items"]:
        nonempty(it["review"], "review"); nonempty(it["product"], "product")
        assert it["rating"] in (1, 2, 3, 4, 5), it["rating"]
        assert isinstance(it["verified"], bool), it["verified"]
    assert r["verified"] == sum(it["verified"] for it in r["items"]), "verified counts the items"
elif app == "tree_summary":
    levels = r["levels"]
    assert r["bytes"] > 0 and r["chunks"] >= 2, (r["bytes"], r["chunks"])
    assert levels[0] == r["chunks"] and levels[-1] == 1, levels
    for a, b in zip(levels, levels[1:]):
        assert b == (a + 3) // 4, f"groups of four: {a} -> {b}"
    nonempty(r["summary"], "summary")
    cp = r["central_parts"]
    assert isinstance(cp, list) and all(1 <= i <= r["chunks"] for i in cp), cp
else:
    raise SystemExit(f"no checks for {app}")
PY
}

for app in "${apps[@]}"; do
  start=$(date +%s.%N)
  args=$(args_for "$app")
  # shellcheck disable=SC2086
  "$braid" run -m "$model" -t "$threads" --db none --quiet "$root/apps/$app/app.lua" $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  secs=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
  if [ $rc != 0 ] && grep -q "needs the engine's choice scoring" "$tmp/err"; then
    echo "SKIP $app: the engine has no choice scoring for select yet"
    skip=$((skip + 1))
  elif [ $rc != 0 ]; then
    echo "FAIL $app: rc=$rc after ${secs}s: $(head -3 "$tmp/err")"
    fail=$((fail + 1))
  elif [ ! -s "$tmp/out" ]; then
    echo "FAIL $app: empty output"
    fail=$((fail + 1))
  elif ! msg=$(check "$app" "$args" 2>&1); then
    echo "FAIL $app: $(echo "$msg" | tail -1)"
    echo "  output: $(head -c 600 "$tmp/out")"
    fail=$((fail + 1))
  else
    echo "ok   $app (${secs}s)"
  fi
done

# Bad programs: a clear error naming FILE:LINE, a traceback when Lua ran,
# and a non-zero exit.
bad() {  # bad NAME PATTERN SOURCE
  printf '%s' "$3" >"$tmp/$1.lua"
  "$braid" run -m "$model" -t "$threads" --db none --quiet --lua-seconds 1 "$tmp/$1.lua" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc = 0 ] || ! head -1 "$tmp/err" | grep -qE "$2"; then
    echo "FAIL bad/$1: rc=$rc stderr: $(head -3 "$tmp/err")"
    fail=$((fail + 1))
  else
    echo "ok   bad/$1: $(head -1 "$tmp/err")"
  fi
}
bad syntax '^braid: .*syntax\.lua:2: ' $'local x = 1\nlocal = 2\n'
bad runtime '^braid: .*runtime\.lua:3: attempt to index a nil value' $'local t\nreturn function()\n  return t.x\nend\n'
bad unknown_input "^braid: .*unknown_input\.lua:2: f: unknown input 'chunkk'" \
  $'local f = braid.fn { name = "f", prompt = "{{chunk}} {{gen s max_tokens=4}}" }\nreturn f{ chunkk = "x" }.s:get()\n'
bad template "^braid: .*template\.lua:1: braid\.fn: " $'local f = braid.fn "{{gen s max_token=4}}"\n'
bad sandbox "^braid: .*sandbox\.lua:1: 'io' is not available in the Braid sandbox" $'return io.open("/etc/passwd")\n'
bad messages_output "^braid: .*messages_output\.lua:2: braid\.fn: g: messages\[2\]:1:4: an output \(\{\{gen b \.\.\.\}\}\) cannot be in a message" \
  $'local x = 1\nlocal g = braid.fn { name = "g", prompt = "{{gen a}}", messages = {\n  { role = "user", content = "hi" }, { role = "assistant", content = "A: {{gen b}}" } } }\n'
bad messages_role "^braid: .*messages_role\.lua:1: braid\.fn: messages\[2\]: role 'bot' is not one of system, user, assistant" \
  $'local g = braid.fn { prompt = "{{gen a}}", messages = { { role = "user", content = "hi" }, { role = "bot", content = "x" } } }\n'
bad loop "^braid: .*loop\.lua:1: time limit" $'while true do end\n'
if grep -q "stack traceback" "$tmp/err"; then echo "ok   bad/loop has a traceback"; else echo "FAIL bad/loop: no traceback"; fail=$((fail + 1)); fi
printf 'return 1' >"$tmp/args.lua"
"$braid" run --mode fast "$tmp/args.lua" >/dev/null 2>"$tmp/err"
if [ $? = 2 ] && grep -q "mode must be dag, baseline or baseline-async" "$tmp/err"; then echo "ok   bad/option"; else echo "FAIL bad/option: $(cat "$tmp/err")"; fail=$((fail + 1)); fi
# --json on failure: a JSON object with the error; -q still names the run on stderr.
printf 'error("boom")\n' >"$tmp/boom.lua"
"$braid" run -m "$model" -t "$threads" --db "$tmp/runs.db" -q --json "$tmp/boom.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 1 ] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['result'] is None and 'boom' in r['error'] and r['run_id'].startswith('run-'), r
" "$tmp/out" && grep -q "^braid: run run-" "$tmp/err"; then
  echo "ok   bad/json: error object, run id on stderr with -q"
else
  echo "FAIL bad/json: rc=$rc out: $(head -c 300 "$tmp/out") err: $(head -c 300 "$tmp/err")"; fail=$((fail + 1))
fi
# Select scores on a chat function with messages: v:scores() in the program,
# the same scores in --json's node, and the value is the best-scored choice.
cat >"$tmp/scores.lua" <<'LUA'
local ask = braid.fn { name = "ask", prompt = [[{{select answer choices=["shark", "dolphin", "octopus"]}}]],
  messages = {
    { role = "system", content = "You answer multiple-choice questions with one word." },
    { role = "user", content = "Which of these animals is a {{kind}}? shark, dolphin, octopus" },
    { role = "assistant", content = "Let me think." },
  } }
local a = ask{ kind = "mammal" }.answer
return { scores = a:scores(), answer = a:get() }
LUA
"$braid" run -m "$model" -t "$threads" --db none -q --json "$tmp/scores.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 0 ] && grep -q "needs the engine's choice scoring" "$tmp/err"; then
  echo "SKIP scores: the engine has no choice scoring for select yet"
  skip=$((skip + 1))
elif [ $rc = 0 ] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
s = r['result']['scores']
assert sorted(s) == ['dolphin', 'octopus', 'shark'], s
assert all(isinstance(x, float) and x < 0 for x in s.values()), s
assert r['result']['answer'] == max(s, key=s.get), r['result']
assert r['nodes'][0]['scores'] == {'answer': s}, r['nodes'][0]
" "$tmp/out"; then
  echo "ok   scores: v:scores() and --json agree; the value is the best choice"
else
  echo "FAIL scores: rc=$rc out: $(head -c 600 "$tmp/out") err: $(head -c 300 "$tmp/err")"; fail=$((fail + 1))
fi

[ $fail -gt 0 ] && exit 1
[ $skip -gt 0 ] && exit 77
exit 0
