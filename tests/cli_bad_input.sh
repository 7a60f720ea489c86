#!/usr/bin/env bash
# The braid command on bad model files and bad option values: each must fail
# with a non-zero exit and one line on stderr that names the file or the
# option, the value and the problem (for numbers, the range).
# Usage: cli_bad_input.sh BRAID_BINARY MODEL_PATH
set -u
braid=$1
model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

expect() {  # expect NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  "$braid" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" = 0 ] || [ "$lines" != 1 ] || ! grep -qE "$pattern" "$tmp/err"; then
    echo "FAIL $name: rc=$rc lines=$lines stderr: $(cat "$tmp/err")"
    fail=$((fail + 1))
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}

# Truncated GGUF (the real file cut short).
head -c 100000 "$model" >"$tmp/truncated.gguf"
expect truncated "truncated.gguf" generate -m "$tmp/truncated.gguf" -p hi
# Wrong magic.
printf 'GGUX\003\000\000\000' >"$tmp/magic.gguf"; head -c 64 /dev/zero >>"$tmp/magic.gguf"
expect magic "magic.gguf.*(magic|GGUF)" generate -m "$tmp/magic.gguf" -p hi
# Wrong version.
printf 'GGUF\011\000\000\000' >"$tmp/version.gguf"; head -c 64 /dev/zero >>"$tmp/version.gguf"
expect version "version.gguf.*version" generate -m "$tmp/version.gguf" -p hi
# Missing file.
expect missing "nope.gguf" generate -m "$tmp/nope.gguf" -p hi
# Empty file.
: >"$tmp/empty.gguf"
expect empty "empty.gguf" generate -m "$tmp/empty.gguf" -p hi
# A safetensors checkpoint whose header claims more bytes than the file has.
mkdir -p "$tmp/ckpt"
echo '{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32,"rms_norm_eps":1e-5,"max_position_embeddings":64}' >"$tmp/ckpt/config.json"
printf '\377\377\000\000\000\000\000\000{}' >"$tmp/ckpt/model.safetensors"
expect safetensors "model.safetensors" generate -m "$tmp/ckpt" -p hi
# A checkpoint without a tokenizer is refused at load, naming the file looked
# for and --tokenizer, by every command that opens a model for text.
fixtures=$(cd "$(dirname "$0")/fixtures" && pwd)
mkdir -p "$tmp/notok"
cp "$fixtures/models/llama_tiny/config.json" "$fixtures/models/llama_tiny/model.safetensors" "$tmp/notok/"
echo 'return "x"' >"$tmp/tok_app.lua"
expect no_tokenizer "^braid: $tmp/notok: no tokenizer: looked for $tmp/notok/tokenizer.json .*with --tokenizer PATH\$" generate -m "$tmp/notok" -p hi
expect no_tokenizer_run "$tmp/notok: no tokenizer: .*--tokenizer PATH" run --db none -m "$tmp/notok" "$tmp/tok_app.lua"
expect tokenizer_folder "tokenizer $tmp/ckpt: the folder has no tokenizer.json" generate -m "$tmp/notok" --tokenizer "$tmp/ckpt" -p hi
expect tokenizer_vocab "tokenizer/qwen2: tokenizer has [0-9]+ tokens but the model only 512" run --db none -m "$tmp/notok" --tokenizer "$fixtures/tokenizer/qwen2" "$tmp/tok_app.lua"
# Bad option values.
expect option "temperature|temp" generate -m "$model" -p hi --temp -1
expect unknown "unknown option" generate -m "$model" -p hi --bogus
expect precision "precision must be split16 or int8" generate -m "$model" -p hi --precision int4
expect kv "kv must be f16, f32, q8 or fp8" generate -m "$model" -p hi --kv q4
expect kv_fp8_cpu "an FP8 KV cache \\(--kv fp8\\) is the CUDA backend's" generate -m "$model" -p hi --kv fp8
expect spec "spec: expected off, ngram, suffix, draft" generate -m "$model" -p hi --spec drafty
expect spec_draft_layers "the draft must have fewer layers than the target's 30" generate -m "$model" -p hi --spec draft=30
expect spec_draft_file "draft model: .*nowhere.gguf" generate -m "$model" -p hi --spec draft=nowhere.gguf
expect spec_n "spec ngram:N: N must be an integer in \[1, 32\]" generate -m "$model" -p hi --spec ngram:99
expect spec_run "spec: expected off, ngram, suffix, draft" run -m "$model" --db none --spec bogus apps/chain/app.lua
expect spec_fixed "':fixed' given twice" run -m "$model" --db none --spec ngram:fixed:fixed apps/chain/app.lua
expect spec_bench "spec: expected off, ngram, suffix, draft" bench --serve -m "$model" --spec nope
expect stream "stream must be auto, nt or t0" generate -m "$model" -p hi --stream fast
expect device "unknown device 'tpu'" generate -m "$model" -p hi --device tpu
expect device-index "cuda:x" generate -m "$model" -p hi --device cuda:x
BRAID_STREAM=fast expect stream-env "BRAID_STREAM must be nt, t0 or auto" generate -m "$model" -p hi

# Numbers: every numeric option of every subcommand refuses a value that
# would wrap, a value out of its range, a non-number and (for reals) NaN and
# infinities, naming the option, the value and the range.
# range NAME OPTION VALUE LO HI ARGS...: runs braid ARGS... OPTION VALUE, then
# the words in $after (braid run's script).
after=()
range() {
  local name=$1 opt=$2 value=$3 lo=$4 hi=$5
  shift 5
  expect "$name" "^braid .*: option $opt: $value is out of range \\[$lo, $hi\\]\$" \
    "$@" "$opt" "$value" "${after[@]}"
}
# generate / chat
range gen_n_wraps -n 4294967296 1 1048576 generate -p hi
range gen_n_zero -n 0 1 1048576 generate -p hi
range gen_n_long -n 99999999999999999999 1 1048576 generate -p hi
range gen_threads_wraps -t 4294967297 0 1024 generate -p hi
range gen_threads_neg -t -1 0 1024 generate -p hi
range gen_ctx_huge --ctx 2147483648 0 131072 generate -p hi
range gen_top_k --top-k 4294967296 0 1048576 generate -p hi
range gen_last_n --repeat-last-n -2 -1 1048576 generate -p hi
range gen_temp --temp 101 0 100 generate -p hi
range gen_top_p --top-p 1.5 0 1 generate -p hi
range gen_min_p --min-p -0.1 0 1 generate -p hi
range gen_repeat_penalty --repeat-penalty 1e9 0 100 generate -p hi
range gen_freq --frequency-penalty 3 -2 2 generate -p hi
range gen_presence --presence-penalty -3 -2 2 generate -p hi
range chat_n -n 4294967296 1 1048576 chat -p hi
expect gen_temp_nan "option --temp: nan is not a finite number" generate -p hi --temp nan
expect gen_top_p_inf "option --top-p: inf is not a finite number" generate -p hi --top-p inf
expect gen_n_text "option -n: '12x' is not an integer" generate -p hi -n 12x
expect gen_n_empty "option -n: '' is not an integer" generate -p hi -n ""
expect gen_seed_neg "option --seed: '-1' is not an unsigned integer" generate -p hi --seed -1
expect gen_seed_wraps "option --seed: 18446744073709551616 is out of range" generate -p hi --seed 18446744073709551616
expect gen_needs_value "option -n needs a value" generate -p hi -n
# Files read by options: regular files only, of a bounded size.
expect gen_file_dev "option -f: '/dev/zero' is not a regular file" generate -f /dev/zero
expect gen_file_dir "option -f: '$tmp' is not a regular file" generate -f "$tmp"
expect gen_file_missing "option -f: cannot open '$tmp/none.txt'" generate -f "$tmp/none.txt"
truncate -s 16777217 "$tmp/big.txt"
expect gen_file_big "option -f: '$tmp/big.txt' has 16777217 bytes, more than the limit of 16777216" generate -f "$tmp/big.txt"
# bench
range bench_p -p 4294967296 0 131064 bench
range bench_n -n -1 0 131064 bench
range bench_r -r 0 1 1000 bench
range bench_threads -t 2000 0 1024 bench
range bench_ctx --ctx 131073 0 131072 bench
# bench --serve
range serve_c -c 4294967297 1 4096 bench --serve
range serve_c_zero -c 0 1 4096 bench --serve
expect serve_c_item "option -c: 'x' is not an integer" bench --serve -c 1,x,4
range serve_prompt --prompt-len 0 1 32768 bench --serve
range serve_gen --gen-len 4294967296 1 32768 bench --serve
range serve_shared --shared-prefix -1 0 32768 bench --serve
range serve_batch --batch-tokens 2049 0 2048 bench --serve
range serve_latency_tokens --latency-batch-tokens 3000 0 2048 bench --serve
expect run_weights_zero "option --client-weights: the weight of 'a' must be a number in \\(0, 1e6\\], got '0'" run --db none --fair --client-weights a=0 apps/chain/app.lua
expect run_weights_twice "option --client-weights: client 'a' is given twice" run --db none --fair --client-weights a=1,a=2 apps/chain/app.lua
expect run_weights_form "option --client-weights: 'a' is not NAME=WEIGHT" run --db none --fair --client-weights a apps/chain/app.lua
range serve_clients --clients 0 1 1000 bench --serve --rate 4
expect kv_host_unit "option --kv-host: '12X' is not a size \\(MiB, or with M or G: 512M, 16G\\), auto or off" run --db none --kv-host 12X apps/chain/app.lua
expect kv_host_negative "option --kv-host: '-1' is not a size" bench --serve --rate 4 --kv-host -1
expect kv_host_small "the host KV tier of 1 bytes holds no block of [0-9]+ bytes" bench --serve --rate 4 --requests 1 --kv-host 0.000001
expect kv_prefetch "option --kv-prefetch: 'maybe' is not on or off" run --db none --kv-prefetch maybe apps/chain/app.lua
expect serve_policy "unknown admission policy 'lifo' \\(fcfs, priority, vtc, lpm or plas\\)" bench --serve --rate 4 --policy lifo
expect serve_batch_cpu "max_batch_tokens must be in \[1, 256\], got 257" bench --serve --batch-tokens 257
expect serve_rate "option --rate: 0 is out of range \[0.01, 100000\] \(or 'inf'\)" bench --serve --rate 0
range serve_requests --requests 0 1 100000 bench --serve --rate 4
range serve_ratio --random-ratio 1.5 0 1 bench --serve --rate 4
range serve_mix --latency-mix 1000 0 256 bench --serve
range serve_reps -r 0 1 1000 bench --serve
range serve_threads -t 4294967297 0 1024 bench --serve
expect serve_kv "needs a context of .* and [0-9]+ KV tokens; the limits are 131072 and 4194304" bench --serve -c 4096 --prompt-len 32768
# runs
expect runs_show_unknown "no run store at '.*runs.db'" runs --db "$tmp/runs.db" show nope
expect runs_show_two "give one run id, got 2" runs --db "$tmp/runs.db" show a b
expect runs_rm_none "give the ids of the runs to remove" runs --db "$tmp/runs.db" rm
expect runs_verb "unknown subcommand 'bogus'" runs --db "$tmp/runs.db" bogus
expect runs_option "unknown option '--bogus'" runs --db "$tmp/runs.db" --bogus
range runs_n -n 0 1 1000000 runs --db "$tmp/runs.db"
# run (options before the script; the script is not read before they pass)
echo 'return "x"' >"$tmp/app.lua"
after=("$tmp/app.lua")
range run_engines --engines 65 1 64 run --db none
range run_kv --kv-tokens 4294967296 0 4194304 run --db none
range run_kv_memory --kv-memory 0.99 0.01 0.95 run --db none
range run_kv_memory_zero --kv-memory 0 0.01 0.95 run --db none
range run_max_running --max-running 0 1 4096 run --db none
range run_rtt --rtt-ms -1 0 600000 run --db none
range run_threads -t 4294967297 0 1024 run --db none
range run_ctx --ctx 99999999 0 131072 run --db none
range run_lua_mem_zero --lua-memory-mb 0 1 65536 run --db none
range run_lua_mem_neg --lua-memory-mb -1 1 65536 run --db none
range run_lua_seconds_neg --lua-seconds -1 0.001 86400 run --db none
range run_lua_instr --lua-instructions -1 0 1000000000000000 run --db none
expect run_lua_seconds_nan "option --lua-seconds: nan is not a finite number" run --db none --lua-seconds nan "$tmp/app.lua"
expect run_resume_empty "option --resume: the run id is empty" run --db none --resume "" "$tmp/app.lua"
expect run_script_dev "script: '/dev/zero' is not a regular file" run --db none /dev/zero

if [ $fail != 0 ]; then echo "$fail failed"; exit 1; fi
echo "all bad inputs refused cleanly"
