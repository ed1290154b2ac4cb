# Helpers shared by the `dsa serve` tests (server_test.sh, load_test.sh); sourced, not run.
# Usage: dsa=BINARY; root=REPO_ROOT; source server_lib.sh. Sets $model, $here, $tmp (removed on
# exit), $fail; on exit every server started (in $pids) is killed if still running, and every
# helper in $helpers (background client processes a script adds) is sent SIGTERM. Works under
# `set -u` alone (server_test.sh) and under `set -euo pipefail` (load_test.sh).
# shellcheck shell=bash disable=SC2034,SC2154
model="$root/models/tiny-dsa"
here="$root/tests/server"
fail=0
tmp=$(mktemp -d)
pids=()
helpers=()
server_lib_cleanup() {
  for p in "${helpers[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap server_lib_cleanup EXIT

ok() { echo "ok   $*"; }
bad() {
  echo "FAIL $*"
  fail=1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME ARGS...: starts a server (log in $tmp/NAME.log), sets $port and $pid, waits for 200.
start() {
  local name=$1
  shift
  port=$(free_port)
  "$dsa" serve --model "$model" --host 127.0.0.1 --port "$port" "$@" >"$tmp/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  local code="" seen503=0
  for _ in $(seq 1 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 503 ] && seen503=1
    [ "$code" = 200 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$code" != 200 ]; then
    bad "$name: /health never answered 200 (last $code); log:"
    cat "$tmp/$name.log"
    exit 1
  fi
  ok "$name: /health 200 on port $port (503 seen while loading: $seen503)"
}

# stop_server NAME: SIGTERM, expect exit 0 within 20 s.
stop_server() {
  local name=$1 rc=0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    bad "$name: still running 20 s after SIGTERM"
    kill -KILL "$pid"
  fi
  wait "$pid" || rc=$?
  if [ "$rc" = 0 ]; then
    ok "$name: SIGTERM -> exit 0"
  else
    bad "$name: exit $rc after SIGTERM"
    tail -5 "$tmp/$name.log"
  fi
}

url() { echo "http://127.0.0.1:$port$1"; }
post() { curl -s --max-time 60 "$(url "$1")" -H 'Content-Type: application/json' -d "$2"; }

# metric NAME: its value in /metrics.
metric() { curl -s "$(url /metrics)" | awk -v n="$1" '$1 == n { print $2 }'; }

# have_node: node and npm are installed.
have_node() { command -v node >/dev/null && command -v npm >/dev/null; }

# npm_install FILES...: copies package.json, package-lock.json and FILES (from tests/server) to $tmp
# and installs the locked dependencies there (the official `openai` client), outside the source
# tree; on failure prints npm's log and returns 1.
npm_install() {
  local f
  cp "$here/package.json" "$here/package-lock.json" "$tmp/"
  for f in "$@"; do cp "$here/$f" "$tmp/"; done
  if ! (cd "$tmp" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >"$tmp/npm.log" 2>&1); then
    cat "$tmp/npm.log"
    return 1
  fi
}
