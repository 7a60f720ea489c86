#!/usr/bin/env bash
# Speculative decoding end to end through `braid run` on the bundled model:
# each workload with --spec off, ngram and suffix (adaptive: guesses are
# checked where the measured step cost says they pay) and, for reference,
# ngram:8:fixed (every guess offered is checked). Workloads:
#   grounded-1 / grounded-16  bench/spec/fanout.lua: 1 or 16 calls at once
#                             that copy a passage of the annual report back
#   open-1 / open-16          the same with short stories (nothing to copy)
#   map_reduce                apps/map_reduce on the annual report (17
#                             sibling summaries, then one abstract)
# and any app named after the options. Prints per workload and mode the
# median wall time, its ratio to off and the engine's speculation line
# (guesses kept, tokens per decode pass, share of time proposing); the
# modes take turns, round after round. Prints the CPU model. WORKLOADS and
# MODES (space-separated) replace the lists, e.g. MODES="off draft draft=8".
#   [BRAID=BINARY] [WORKLOADS=...] [MODES=...] scripts/bench_spec_apps.sh [ROUNDS] [THREADS] [APPS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${1:-3}
threads=${2:-2}
shift 2 || shift $# || true
braid=${BRAID:-build/frontend/braid}
report=bench/inputs/annual_report.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; threads $threads; load: $(cut -d' ' -f1-3 /proc/loadavg)"

read -ra workloads <<<"${WORKLOADS:-grounded-1 grounded-16 open-1 open-16 map_reduce}"
workloads+=("$@")
read -ra modes <<<"${MODES:-off ngram suffix ngram:8:fixed}"
args_for() {
  case "$1" in
    grounded-*) echo "bench/spec/fanout.lua grounded ${1#grounded-} $report" ;;
    open-*) echo "bench/spec/fanout.lua open ${1#open-}" ;;
    map_reduce) echo "apps/map_reduce/app.lua $report" ;;
    *) echo "apps/$1/app.lua" ;;
  esac
}
for ((r = 0; r < rounds; r++)); do
  for w in "${workloads[@]}"; do
    for m in "${modes[@]}"; do
      f="$tmp/$w.${m//:/_}"
      t0=$(date +%s.%N)
      # shellcheck disable=SC2046
      "$braid" run -t "$threads" --db none --spec "$m" --json $(args_for "$w") \
        >"$f.out" 2>"$f.err"
      t1=$(date +%s.%N)
      echo "$t1 - $t0" | bc -l >>"$f.times"
      # The outputs must not depend on speculation.
      python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["result"], sort_keys=True))' \
        "$f.out" >"$f.result"
      if [ "$m" != off ] && ! cmp -s "$tmp/$w.off.result" "$f.result"; then
        echo "FAIL: --spec $m changed the result of $w" >&2
        exit 1
      fi
      grep '^braid: speculation' "$f.err" | sed 's/^braid: //' >"$f.spec" || true
    done
  done
done
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
printf '| workload | spec | wall s | vs off | speculation |\n| --- | --- | ---: | ---: | --- |\n'
for w in "${workloads[@]}"; do
  base=$(median <"$tmp/$w.off.times")
  for m in "${modes[@]}"; do
    f="$tmp/$w.${m//:/_}"
    t=$(median <"$f.times")
    printf '| %s | %s | %.2f | %.2fx | %s |\n' "$w" "$m" "$t" "$(echo "$base / $t" | bc -l)" \
      "$(sed 's/^speculation ([a-z]*): //' "$f.spec" 2>/dev/null)"
  done
done
