#!/usr/bin/env bash
# Pictures of the dashboard for docs/img/: apps/map_reduce (its bundled
# input inlined, as a server's program reads no files) submitted to a
# braid serve and followed by the page in headless Chromium, caught while
# it runs and when it is done (tests/dashboard/dashboard_test.py does it).
#   scripts/screenshot_dashboard.sh [BRAID] [MODEL]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
braid=${1:-$root/build/frontend/braid}
model=${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$root/apps/map_reduce" "$tmp/map_reduce.lua" <<'PY'
import sys
app = open(sys.argv[1] + "/app.lua").read()
text = open(sys.argv[1] + "/input.txt").read()
call = 'braid.read(path or "input.txt")'
assert call in app, "apps/map_reduce/app.lua no longer reads its input as expected"
open(sys.argv[2], "w").write(app.replace(call, "[==[" + text + "]==]"))
PY
python3 "$root/tests/dashboard/dashboard_test.py" "$braid" "$model" --program "$tmp/map_reduce.lua" \
  --keep-screenshot-at-mid-run "$root/docs/img/dashboard_running.png" \
  --screenshot "$root/docs/img/dashboard.png"
