#!/usr/bin/env bash
# braid repl from a pipe (no terminal): the same evaluation as in a
# terminal, without line editing. Checks expressions, multi-line input,
# globals across inputs, a call and its get, errors that leave the session
# usable, the names of functions and braid.map nodes defined at the prompt,
# :load of an app with its arguments, and the commands (:vars naming each
# output by its function and node).
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
hi = braid.fn "Hi {{gen out max_tokens=2 temperature=0}}"
hi
hello = braid.fn {
  prompt = "Hello {{gen out max_tokens=2 temperature=0}}" }
hello
braid.fn { name = "greeter", prompt = "{{gen out max_tokens=2}}" }
m = braid.map(v, twice)
local function shout(s) return s:upper() end; m2 = braid.map(v, shout)
m3 = braid.map(v, function(s) return s end)
m:get() == twice(v:get()) and "mapped"
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
check "error names the input and line" '^error: input[0-9]+:1: boom$'
check "the session goes on" '^3$'
# Functions are named by the input and line that defined them, or name=.
check "a function named by its input" '^braid\.fn\(fn@input[0-9]+:1\)$'
names=$(grep -E '^braid\.fn\(fn@input[0-9]+:1\)$' "$tmp/out" | sort -u | wc -l)
[ "$names" = 2 ] || { echo "FAIL two functions, two names: $names distinct"; fail=$((fail + 1)); }
check "a function's name= field" '^braid\.fn\(greeter\)$'
check "braid.map of a function" '^mapped$'
check ":load runs the app with its arguments" '"question": "What is the population of Paris times two\?"'
check "a bad command line says what" '^error: the quote at column [0-9]+ is not closed$'
check ":vars: function.output and its node" '^ +[0-9]+  say\.out #[0-9]+ +ready '
check ":runs" '^run-[0-9-]+-[0-9a-f]+ +this session: [0-9]+ calls \([0-9]+ done\)'
check ":graph" "^wrote $tmp/g.dot$"
check ":stats" '^engine 0: [0-9]+ requests'
check ":model" '^engine 0: .*\(llama, cpu\)$'
check "unknown command" "^unknown command ':nonsense'"
check "an input left open at the end" "^error: input[0-9]+:[0-9]+: .*<eof>"
[ -s "$tmp/g.dot" ] && grep -q digraph "$tmp/g.dot" || { echo "FAIL graph file"; fail=$((fail + 1)); }
# braid.map nodes are labelled with the function mapped: a global, a local,
# or where an anonymous one was defined.
for label in 'map\(twice\)#' 'map\(shout\)#' 'map\(fn@input[0-9]+:1\)#'; do
  grep -qE "label=\"$label" "$tmp/g.dot" ||
    { echo "FAIL no node labelled $label in the graph"; fail=$((fail + 1)); }
done
if [ "$fail" -ne 0 ]; then
  echo "--- output"; cat "$tmp/out"; echo "--- stderr"; tail -5 "$tmp/err"
fi
echo "$fail failed"
[ "$fail" = 0 ]
