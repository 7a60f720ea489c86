#!/usr/bin/env bash
# braid repl in a real terminal (tmux): a multi-line function, a call and its
# get, an error, Ctrl-C during a long get (the session goes on), :graph, and
# the history file. Exits 77 (skipped) when tmux is not installed.
# Usage: repl_tmux.sh BRAID_BINARY MODEL_PATH
set -u
braid=$1
model=$2
if ! command -v tmux >/dev/null; then
  echo "skipped: tmux is not installed (scripts/setup.sh installs it)"
  exit 77
fi
tmp=$(mktemp -d)
sock="braid-repl-test-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0

screen() { tmux -L "$sock" capture-pane -p -t repl -S -200; }
# typein TEXT...: each TEXT typed literally (no key names), then Enter.
typein() {
  local t
  for t in "$@"; do
    tmux -L "$sock" send-keys -t repl -l "$t"
    tmux -L "$sock" send-keys -t repl Enter
  done
}
# wait_for PATTERN SECONDS: until a line of the screen matches. SECONDS only
# bounds a hang: the model and the terminal can be slow on a loaded machine.
wait_for() {
  local deadline=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    screen | grep -qE -- "$1" && return 0
    sleep 0.2
  done
  return 1
}
# wait_after ANCHOR PATTERN SECONDS: until a line below the last line matching
# ANCHOR matches PATTERN.
wait_after() {
  local deadline=$(($(date +%s) + $3))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    screen | A="$1" awk '$0 ~ ENVIRON["A"] {n = NR} {line[NR] = $0} END {for (i = n + 1; n && i <= NR; i++) print line[i]}' |
      grep -qE -- "$2" && return 0
    sleep 0.2
  done
  return 1
}
check() {  # check NAME PATTERN SECONDS
  if wait_for "$2" "$3"; then
    echo "ok   $1"
  else
    echo "FAIL $1: no line matches '$2' within $3 s"
    fail=$((fail + 1))
  fi
}

tmux -L "$sock" new-session -d -s repl -x 150 -y 50 \
  "HOME=$tmp $braid repl -m $model --db none; echo REPL-EXITED; sleep 30"
check "prompt" '^braid>' 60
typein 'function sq(n)' '  return n * n' 'end'
check "continuation prompt" '^  \.\.\.>' 60
typein 'sq(7)'
check "multi-line function" '^49$' 60
typein 'say = braid.fn { name = "say", prompt = "Say yes: {{gen out max_tokens=4 temperature=0}}" }' \
  'answer = say{}.out:get()' 'type(answer)'
check "a get" '^string$' 120
# On a terminal a get streams its tokens, and the value is not printed twice.
# (each line typed once the previous one is done: text typed ahead is echoed
# by the terminal into the streamed tokens)
typein 'w = say{}.out'
wait_after '^braid> w = say\{\}\.out$' '^braid> ?$' 60
typein 'w:get()'
# The prompt that follows the get (not an earlier empty one) ends the stream.
wait_for '^braid> w:get\(\)$' 60 && wait_after '^braid> w:get\(\)$' '^braid> ?$' 120
typein 'w:get() .. "|end"'
check "a get's value after it streamed" '\|end$' 120
value=$(screen | grep -E '\|end$' | tail -1 | sed 's/|end$//')
shown=$(screen | sed -n '/^braid> w:get()$/,$p' | grep -cxF -- "$value")
if [ -n "$value" ] && [ "$shown" = 1 ]; then
  echo "ok   streamed once: '$value'"
else
  echo "FAIL streamed once: '$value' appears $shown times"
  fail=$((fail + 1))
fi
typein 'error("bad thing")'
check "an error in one line" '^error: input[0-9]+:1: bad thing$' 60
typein 'count = braid.fn { name = "count", prompt = "Count to 5000: 1, 2, 3, {{gen out max_tokens=3000 temperature=0}}" }' \
  'count{}.out:get()'
# Ctrl-C once the get streams its tokens (the REPL clears the flag when an
# input starts, so an earlier Ctrl-C would be lost).
streaming() {
  screen | sed -n '/^braid> count{}\.out:get()$/,$p' | tail -n +2 | grep -q '[^[:space:]]'
}
deadline=$(($(date +%s) + 120))
until streaming || [ "$(date +%s)" -ge "$deadline" ]; do sleep 0.2; done
tmux -L "$sock" send-keys -t repl C-c
check "Ctrl-C stops the get" 'interrupted$' 60
typein 'sq(3)'
check "the session goes on" '^9$' 60
typein ":graph $tmp/g.svg"
check ":graph" "^wrote $tmp/g.svg$" 60
typein ':quit'
check "quit" '^REPL-EXITED$' 60
grep -q "<svg" "$tmp/g.svg" 2>/dev/null || { echo "FAIL graph: $tmp/g.svg is not SVG"; fail=$((fail + 1)); }
grep -q 'sq(7)' "$tmp/.cache/braid/repl_history" 2>/dev/null ||
  { echo "FAIL history: sq(7) not in ~/.cache/braid/repl_history"; fail=$((fail + 1)); }
if [ "$fail" -ne 0 ]; then
  echo "--- screen"
  screen
fi
echo "$fail failed"
[ "$fail" = 0 ]
