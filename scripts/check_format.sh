#!/usr/bin/env bash
# Fails when a C, C++ or CUDA source tracked by git is not laid out as
# .clang-format says, naming each such file (clang-format from setup.sh).
#   scripts/check_format.sh          every tracked source
#   scripts/check_format.sh FILE...  those files only
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format" \
    "($(clang-format --version | sed 's/.*version //')); run: clang-format -i FILE"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files match .clang-format"
