#!/usr/bin/env bash
# kill -9 during a DAG run, then --resume: the run completes, and calls that
# had finished before the kill are replayed from the store, not recomputed.
# Usage: resume_crash.sh BRAID_BINARY REPO_ROOT
set -u
braid=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
app="$root/apps/map_reduce/app.lua"
fail=0
for delay in 2 4 6; do
  db="$tmp/runs-$delay.db"
  "$braid" run -t 1 --db "$db" --json "$app" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  # The delay counts from the run's start (its id on stderr), not the
  # process's: opening the model can take a while on a loaded machine. The
  # deadline only bounds a hang.
  deadline=$(($(date +%s) + 120))
  while ! grep -q 'braid: run run-' "$tmp/err" && kill -0 "$pid" 2>/dev/null &&
    [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 0.1
  done
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  id=$(grep -o 'braid: run run-[^ ]*' "$tmp/err" | head -n 1 | cut -d' ' -f3)
  if [ -z "$id" ]; then echo "FAIL: no run id in: $(head -c 300 "$tmp/err")"; fail=1; continue; fi
  killed=1
  if grep -q '"run_id"' "$tmp/out"; then
    echo "note: run finished before the kill at ${delay}s"
    killed=0
  fi
  # braid runs: the killed run is interrupted, not running.
  state=$("$braid" runs --db "$db" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['state'])")
  if [ $killed = 1 ] && [ "$state" != interrupted ]; then
    echo "FAIL: braid runs shows the killed run $id as '$state'"; fail=1
  fi
  if ! "$braid" run -t 1 --db "$db" --json --resume "$id" "$app" >"$tmp/out2" 2>"$tmp/err2"; then
    echo "FAIL: resume of $id: $(tail -n 3 "$tmp/err2")"; fail=1; continue
  fi
  replayed=$(grep -c '"engine": "store"' "$tmp/out2")
  total=$(grep -c '"label"' "$tmp/out2")
  if ! grep -q '"abstract"' "$tmp/out2"; then echo "FAIL: resumed run has no abstract"; fail=1; continue; fi
  # Finished now, with its nodes' values; then removed.
  if ! "$braid" runs --db "$db" show "$id" | grep -q "^run $id: done"; then
    echo "FAIL: braid runs show $id: $("$braid" runs --db "$db" show "$id" 2>&1 | head -n 3)"; fail=1
  fi
  # Its record as JSON: the keys the server answers too (docs/http-api.md,
  # "Run records").
  if ! "$braid" runs --db "$db" show "$id" --json | python3 -c "
import json, sys
r = json.load(sys.stdin)
assert 'started_unix' not in r, r
assert r['id'] == '$id' and r['state'] == 'done' and r['error'] == '' and r['client'] == '', r
assert r['created_unix'] > 0 and r['finished_unix'] >= r['created_unix'], r
assert r['paused_s'] >= 0, r
assert abs(r['duration_s'] - (r['finished_unix'] - r['created_unix'] - r['paused_s'])) < 1e-6, r
assert r['nodes_done'] > 0 and len(r['nodes']) > 0, r
"; then
    echo "FAIL: braid runs show $id --json: the run record's keys"; fail=1
  fi
  if ! "$braid" runs --db "$db" rm "$id" || "$braid" runs --db "$db" show "$id" 2>/dev/null; then
    echo "FAIL: braid runs rm $id left the run"; fail=1
  fi
  echo "ok: killed at ${delay}s; resumed $id: $replayed of $total nodes replayed from the store"
done
[ $fail = 0 ] && echo "resume after kill -9: ok"
exit $fail
