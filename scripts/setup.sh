#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: installs the packages the
# build needs and fetches the bundled model into models/.
#   scripts/setup.sh            packages + model
#   scripts/setup.sh --dev      also clang-16 and its runtime (sanitizer and fuzz builds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev=0
[ "${1:-}" = "--dev" ] && dev=1

pkgs=(build-essential cmake ninja-build ccache pkg-config python3 python3-pip unzip
      doctest-dev nlohmann-json3-dev libboost-dev libboost-graph-dev
      libsqlite3-dev liblua5.4-dev libedit-dev graphviz bc)
[ $dev = 1 ] && pkgs+=(clang-16 libclang-rt-16-dev)

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

"$root/scripts/fetch_model.sh"
