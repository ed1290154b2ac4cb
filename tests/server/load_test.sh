#!/usr/bin/env bash
# `dsa serve` under concurrent load (ctest `server_load`): the tiny model on CPU with MTP (NEXTN,
# 3 steps) and 16 running requests, so most of the 64 clients' requests wait in the queue and join
# the running batch between steps; load_test.mjs (the official OpenAI Node client, npm ci from
# package-lock.json) drives it and checks every request, then SIGTERM must end the server with
# exit 0. Prints load_test.mjs's JSON summary line (throughput, TTFT and end-to-end percentiles).
# Usage: load_test.sh DSA_BINARY REPO_ROOT [CLIENTS]   (exit 77 = skipped: no node or npm)
set -euo pipefail
dsa="$1"
root="$2"
clients="${3:-64}"
# shellcheck source=tests/server/server_lib.sh
source "$root/tests/server/server_lib.sh"  # $model, $here, $tmp, ok, bad, start, stop_server, ...

if ! have_node; then
  echo "SKIP server_load: node or npm not installed"
  exit 77
fi
npm_install load_test.mjs || {
  echo "FAIL npm ci (its log above)"
  exit 1
}

start load --speculative-algorithm NEXTN --speculative-num-steps 3 --max-running-requests 16
start_s=$SECONDS
# In the background so that the exit trap can stop it (timeout passes the SIGTERM on to node).
timeout 300 node "$tmp/load_test.mjs" "$(url /v1)" "$clients" &
helpers+=($!)
rc=0
wait "$!" || rc=$?
if [ "$rc" = 0 ]; then
  ok "load_test.mjs: $clients clients ($((SECONDS - start_s)) s)"
else
  bad "load_test.mjs: exit $rc; the server log's tail:"
  tail -5 "$tmp/load.log"
fi
if kill -0 "$pid" 2>/dev/null; then
  ok "the server is still up after the load"
else
  bad "the server died under the load; log:"
  tail -20 "$tmp/load.log"
fi
stop_server load
n=$(grep -c 'prompt + .* completion tokens, ttft' "$tmp/load.log" || true)
if [ "$n" = $((2 * clients)) ]; then
  ok "one log line per request ($n)"
else
  bad "$n per-request log lines, not $((2 * clients))"
fi

if [ "$fail" = 0 ]; then
  echo "server_load: all checks passed"
else
  echo "server_load: FAILED"
fi
exit "$fail"
