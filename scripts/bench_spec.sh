#!/usr/bin/env bash
# Speculative decoding at batch 1 on the bundled model (braid generate, greedy,
# 128 tokens): decode tokens/s with --spec off, ngram and suffix on prompts
# whose answers copy from their input ("grounded") and on open-ended ones
# ("open"), rounds interleaved so that a slow spell of a shared host falls on
# every mode. Prints per prompt the median rate, the ratio to off, the share
# of guesses kept and the tokens per forward pass, and fails if a speculative
# output differs from the plain one. Run on an otherwise idle machine:
#   scripts/bench_spec.sh [ROUNDS] [THREADS] [BRAID]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${1:-3}
threads=${2:-2}
braid=${3:-build/frontend/braid}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $threads threads, load: $(cut -d' ' -f1-3 /proc/loadavg)"

names=(spelling extract quote story explain)
kinds=(grounded grounded grounded open open)
prompts=(
  "Fix the spelling in this text and return the whole corrected text: The quick brwon fox jumpd over the lazzy dog. It was a sunny day in the vilage, and all the childern were playing in the park near the old church. Their parents watched from the benchs, talking about the wether."
  "Extract every person's name and city from the text below as a JSON list of objects with the keys name and city.
Text: Maria Lopez moved from Madrid to Boston in 2019. Her brother Carlos Lopez still lives in Seville. Their friend Anna Schmidt works in Berlin, and her colleague John Miller commutes from Potsdam."
  "Copy the following paragraph exactly, then stop.
The committee met on Tuesday to review the budget for the coming year. After a long discussion, the members agreed to increase funding for the library and the public parks, while reducing spending on new office furniture."
  "Write a short story about a dragon who is afraid of the dark."
  "Explain how a bicycle works to a ten-year-old."
)
modes=(off ngram suffix)

for ((r = 0; r < rounds; r++)); do
  for i in "${!prompts[@]}"; do
    for m in "${modes[@]}"; do
      "$braid" generate -p "${prompts[$i]}" --temp 0 -n 128 -t "$threads" --spec "$m" -v \
        >"$tmp/$i.$m.out" 2>"$tmp/$i.$m.err"
      rate=$(sed -n 's/.*generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$tmp/$i.$m.err")
      echo "$rate" >>"$tmp/$i.$m.rates"
      sed -n 's/^speculation: \([0-9]*\) of \([0-9]*\) guesses accepted ([0-9]*%), \([0-9.]*\) tokens.*/\1 \2 \3/p' \
        "$tmp/$i.$m.err" >>"$tmp/$i.$m.spec"
      if [ "$m" != off ] && ! cmp -s "$tmp/$i.off.out" "$tmp/$i.$m.out"; then
        echo "FAIL: --spec $m changed the output of prompt ${names[$i]}" >&2
        exit 1
      fi
    done
  done
done

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
printf '%-9s %-8s %-7s %9s %7s %8s %10s\n' prompt kind spec "tok/s" ratio accepted "tok/pass"
for i in "${!prompts[@]}"; do
  base=$(median <"$tmp/$i.off.rates")
  for m in "${modes[@]}"; do
    rate=$(median <"$tmp/$i.$m.rates")
    acc="-" per="1.00"
    if [ -s "$tmp/$i.$m.spec" ]; then
      acc=$(awk '{a += $1; p += $2} END {printf "%.0f%%", p ? 100 * a / p : 0}' "$tmp/$i.$m.spec")
      per=$(awk '{s += $3} END {printf "%.2f", s / NR}' "$tmp/$i.$m.spec")
    fi
    printf '%-9s %-8s %-7s %9.1f %6.2fx %8s %10s\n' "${names[$i]}" "${kinds[$i]}" "$m" "$rate" \
      "$(echo "$rate / $base" | bc -l)" "$acc" "$per"
  done
done
echo "outputs: identical with and without speculation on every prompt"
