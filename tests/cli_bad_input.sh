#!/usr/bin/env bash
# The braid command on bad model files: each must fail with a non-zero exit
# and one line on stderr that names the file and the problem.
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
# Bad option values.
expect option "temperature|temp" generate -m "$model" -p hi --temp -1
expect unknown "unknown option" generate -m "$model" -p hi --bogus
expect precision "precision must be split16 or int8" generate -m "$model" -p hi --precision int4
expect kv "kv must be f16, f32 or q8" generate -m "$model" -p hi --kv q4

if [ $fail != 0 ]; then echo "$fail failed"; exit 1; fi
echo "all bad inputs refused cleanly"
