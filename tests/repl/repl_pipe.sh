#!/usr/bin/env bash
# braid repl from a pipe (no terminal): the same evaluation as in a
# terminal, without line editing. Checks expressions, multi-line input,
# globals across inputs, a call and its get, errors that leave the session
# usable, :load of an app with its arguments, and the commands.
# Usage: repl_pipe.sh BRAID_BINARY MODEL_PATH
set -u
braid=$1
model=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

cat >"$tmp/in.lua" <<'LUA'
x = 1 + 2
x * 2
function twice(s)
  return s .. s
end
twice("ab")
say = braid.fn { name = "say", prompt = "Count: one, two, {{gen out max_tokens=6 temperature=0}}" }
v = say{}.out
v
#v:get() > 0
error("boom")
x
:load APPS/react/app.lua "What is the population of Paris times two?"
:load APPS/react/app.lua "unclosed
:vars
:runs
:graph GRAPH
:stats
:model
:nonsense
local t = {
  a = 1,
LUA
sed -i "s#APPS#$root/apps#; s#GRAPH#$tmp/g.dot#" "$tmp/in.lua"
"$braid" repl -m "$model" --db none <"$tmp/in.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?

check() {  # check NAME PATTERN: a line of the output matches
  if grep -qE -- "$2" "$tmp/out"; then
    echo "ok   $1"
  else
    echo "FAIL $1: no line matches '$2'"
    fail=$((fail + 1))
  fi
}
[ "$rc" = 0 ] || { echo "FAIL exit status $rc"; fail=$((fail + 1)); }
check "expression" '^6$'
check "multi-line function" '^abab$'
check "a variable prints its state" '^braid\.var\(say\.out #[0-9]+, (pending|ready)\)$'
check "get" '^true$'
check "error names the place" '^error: stdin:1: boom$'
check "the session goes on" '^3$'
check ":load runs the app with its arguments" '"question": "What is the population of Paris times two\?"'
check "a bad command line says what" '^error: the quote at column [0-9]+ is not closed$'
check ":vars" 'out +ready'
check ":runs" '^run-[0-9-]+-[0-9a-f]+ +this session: [0-9]+ calls \([0-9]+ done\)'
check ":graph" "^wrote $tmp/g.dot$"
check ":stats" '^engine 0: [0-9]+ requests'
check ":model" '^engine 0: .*\(llama, cpu\)$'
check "unknown command" "^unknown command ':nonsense'"
check "an input left open at the end" "^error: stdin:[0-9]+: .*<eof>"
[ -s "$tmp/g.dot" ] && grep -q digraph "$tmp/g.dot" || { echo "FAIL graph file"; fail=$((fail + 1)); }
if [ "$fail" -ne 0 ]; then
  echo "--- output"; cat "$tmp/out"; echo "--- stderr"; tail -5 "$tmp/err"
fi
echo "$fail failed"
[ "$fail" = 0 ]
