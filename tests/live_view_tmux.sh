#!/usr/bin/env bash
# braid run's live view in a terminal narrower than its lines (tmux, 60
# columns; its header alone is over 100): each line is cut to the terminal's
# width, so every redraw clears exactly the block it drew. When the run has
# ended, the screen and its scrollback hold the final header once, and no
# row of a node (the final view has none): a line that wrapped would have
# left its first row behind at each redraw. Exits 77 (skipped) without tmux.
# Usage: live_view_tmux.sh BRAID_BINARY MODEL_PATH
set -u
braid=$(realpath "$1")
model=$(realpath "$2")
if ! command -v tmux >/dev/null; then
  echo "skipped: tmux is not installed (scripts/setup.sh installs it)"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
sock="braid-live-view-test-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
cp "$here/repl/three_calls.lua" "$tmp/app.lua"

screen() { tmux -L "$sock" capture-pane -p -t view -S -500; }
# The time only bounds a hang: the model can be slow on a loaded machine.
wait_for() {  # wait_for PATTERN SECONDS
  local deadline=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    screen | grep -qE -- "$1" && return 0
    sleep 0.2
  done
  return 1
}

tmux -L "$sock" new-session -d -s view -x 60 -y 50 \
  "cd $tmp && $braid run -m $model --db none app.lua; echo RUN-EXITED \$?; sleep 60"
if ! wait_for '^RUN-EXITED' 600; then
  echo "FAIL the run did not end"
  fail=$((fail + 1))
fi
screen | grep -q '^RUN-EXITED 0$' || { echo "FAIL braid run failed"; fail=$((fail + 1)); }
headers=$(screen | grep -c '^app\.lua run')
if [ "$headers" = 1 ]; then
  echo "ok   one header line"
else
  echo "FAIL $headers header lines (stale copies of the view's header)"
  fail=$((fail + 1))
fi
rows=$(screen | grep -cE '^  #[0-9]+ ')
if [ "$rows" = 0 ]; then
  echo "ok   no node rows left"
else
  echo "FAIL $rows node rows left on the screen (stale copies of the view)"
  fail=$((fail + 1))
fi
if [ "$fail" -ne 0 ]; then
  echo "--- screen"
  screen
fi
echo "$fail failed"
[ "$fail" = 0 ]
