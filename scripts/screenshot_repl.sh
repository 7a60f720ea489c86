#!/usr/bin/env bash
# A picture of braid repl in use, for docs/img/repl.png: a session typed
# into a real terminal (tmux), its screen captured and drawn by headless
# Chromium as a terminal would show it.
#   scripts/screenshot_repl.sh [BRAID] [MODEL] [OUT.png]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
braid=${1:-$root/build/frontend/braid}
model=${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${3:-$root/docs/img/repl.png}
for tool in tmux chromium python3; do
  command -v "$tool" >/dev/null || { echo "screenshot_repl: $tool is not installed" >&2; exit 1; }
done
tmp=$(mktemp -d)
sock="braid-shot-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null; sleep 0.5; rm -rf "$tmp" 2>/dev/null || true' EXIT

tmux -L "$sock" new-session -d -s repl -x 124 -y 32 \
  "cd $root && HOME=$tmp $braid repl -m $model --db none 2>/dev/null; sleep 30"
screen() { tmux -L "$sock" capture-pane -p -t repl; }
wait_prompt() {  # until the last line is an empty prompt
  for _ in $(seq 1 300); do
    case "$(screen | sed '/^$/d' | tail -1)" in "braid>" | "  ...>") return 0 ;; esac
    sleep 0.1
  done
}
typein() {
  for t in "$@"; do
    tmux -L "$sock" send-keys -t repl -l "$t"
    tmux -L "$sock" send-keys -t repl Enter
    wait_prompt
  done
}
wait_prompt
typein 'fact = braid.fn { name = "fact", prompt = [[One fact about {{x}}:{{gen out max_tokens=20 stop="\n"}}]] }' \
  'a, b = fact{ x = "owls" }.out, fact{ x = "whales" }.out' \
  'a' \
  'a:get()' \
  'b' \
  'function shout(s)' '  return s:upper() .. "!"' 'end' \
  'shout(b:get())' \
  '{ owls = a, whales = b }' \
  ':vars' \
  ':graph /tmp/facts.svg' \
  ':stats'
screen > "$tmp/screen.txt"
python3 - "$tmp/screen.txt" "$tmp/screen.html" <<'PY'
import html, sys
text = open(sys.argv[1]).read().rstrip("\n")
page = f"""<!doctype html><meta charset="utf-8"><style>
body {{ margin: 0; background: #1e1f22; }}
pre {{ margin: 0; padding: 14px 18px; color: #e6e6e6; font: 14px/1.35 "DejaVu Sans Mono", monospace; white-space: pre; }}
.p {{ color: #7fd47f; }}
</style><pre>{html.escape(text)}</pre>"""
page = page.replace("braid&gt; ", '<span class="p">braid&gt; </span>').replace("  ...&gt; ", '<span class="p">  ...&gt; </span>')
open(sys.argv[2], "w").write(page)
PY
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1130,620 \
  --screenshot="$out" "file://$tmp/screen.html" >/dev/null 2>&1
echo "wrote $out"
