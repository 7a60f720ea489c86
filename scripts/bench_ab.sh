#!/usr/bin/env bash
# A/B of two braid binaries on the bundled model, interleaved so that a slow
# spell of a shared host falls on both: pp512/tg128 (int8 activations), the
# serving level 1 and 16 (int8, q8 KV) and two apps in DAG mode. Prints each
# figure's median per binary and the ratio new/old (> 1 is faster for rates,
# < 1 is faster for seconds). Run on an otherwise idle machine:
#   scripts/bench_ab.sh OLD_BRAID NEW_BRAID [ROUNDS] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
old=$1
new=$2
rounds=${3:-3}
threads=${4:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "old: $old"
echo "new: $new"

median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }

# One round of every measurement for binary $1, appended to $tmp/$2.*
round() {
  local b=$1 tag=$2 t0 t1 app args
  "$b" bench -p 512 -n 128 -r 1 -t "$threads" --precision int8 --json "$tmp/bench.json" >/dev/null
  python3 -c 'import json,sys
for r in json.load(open(sys.argv[1]))["results"]:
  print(r["test"] + "_tok_s", r["avg_ts"])' "$tmp/bench.json" >>"$tmp/$tag.bench"
  "$b" bench --serve -c 1,16 -r 1 --prompt-len 256 --gen-len 128 -t "$threads" --precision int8 --kv q8 \
    --json "$tmp/serve.json" >/dev/null
  python3 -c 'import json,sys
for l in json.load(open(sys.argv[1]))["levels"]:
  print("serve_c%d_decode_tok_s" % l["concurrency"], l["decode_tok_s"])' "$tmp/serve.json" >>"$tmp/$tag.bench"
  for app in chain map_reduce; do
    args=""
    [ "$app" = map_reduce ] && args=bench/inputs/annual_report.txt
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$b" run -t "$threads" --db none -q "apps/$app/app.lua" $args >/dev/null
    t1=$(date +%s.%N)
    echo "app_${app}_s $(echo "$t1 - $t0" | bc -l)" >>"$tmp/$tag.bench"
  done
}

for ((i = 0; i < rounds; i++)); do
  round "$old" old
  round "$new" new
done

printf "| figure | old (median) | new (median) | new/old |\n| --- | ---: | ---: | ---: |\n"
for key in $(cut -d' ' -f1 "$tmp/old.bench" | sort -u); do
  mapfile -t o < <(awk -v k="$key" '$1 == k {print $2}' "$tmp/old.bench")
  mapfile -t n < <(awk -v k="$key" '$1 == k {print $2}' "$tmp/new.bench")
  mo=$(median "${o[@]}")
  mn=$(median "${n[@]}")
  printf "| %s | %.2f | %.2f | %.3f |\n" "$key" "$mo" "$mn" "$(echo "$mn / $mo" | bc -l)"
done
