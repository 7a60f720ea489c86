#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: installs the packages the
# build needs and fetches the bundled model into models/.
#   scripts/setup.sh            packages + model
#   scripts/setup.sh --dev      also clang-16 and its runtime (sanitizer and fuzz builds),
#                               Chromium (the dashboard's test, headless), and .venv-test:
#                               a Python venv with the official `openai` package for the
#                               HTTP API's integration tests
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev=0
[ "${1:-}" = "--dev" ] && dev=1

pkgs=(build-essential cmake ninja-build ccache pkg-config python3 python3-pip unzip
      doctest-dev nlohmann-json3-dev libboost-dev libboost-graph-dev
      libsqlite3-dev liblua5.4-dev libedit-dev graphviz bc curl tmux clang-format)
[ $dev = 1 ] && pkgs+=(clang-16 libclang-rt-16-dev python3-venv chromium)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" != 0 ] && sudo=sudo
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ $dev = 1 ]; then
  venv="$root/.venv-test"
  if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
    echo "setup: creating $venv with the openai package"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check openai
  fi
fi

"$root/scripts/fetch_model.sh"
