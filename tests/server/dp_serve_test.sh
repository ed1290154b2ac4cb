#!/usr/bin/env bash
# `dsa serve --dp-size N` on 127.0.0.1 with the tiny model (CPU), in-process ranks and one process
# per rank (--dp-processes, serve_ranks.h):
#   - --dp-size out of range, --dp-size > 1 with --device cuda on a machine without a GPU, --ep
#     with --device cuda, and a bad --load-chunk-bytes are refused with one line naming the flag
#     and value;
#   - dp 1 (with a legal --load-chunk-bytes) gives each prompt's greedy completion;
#   - dp 2 (--dp-size) and dp 3 (--data-parallel-size): concurrent requests, streamed and not, all
#     complete with dp 1's text and token count;
#   - dp 2 with --ep 2 (the ranks split the MoE's experts, model/expert_parallel.h): the same;
#     --ep 3 (not dividing the 4 experts) is refused;
#   - /metrics: the per-rank gauges show every rank took the same steps, requests were placed on
#     more than one rank, and the totals count every token;
#   - SIGTERM: exit 0.
#   - rank processes: dp 2 and dp 3, and dp 2 with --ep 2 over the processes, as above; SIGTERM
#     drains, every rank process exits and the launcher exits 0; a rank killed by SIGKILL mid-request
#     ends the server within seconds, non-zero and naming the rank, and the client gets an answer
#     (no hang); two launchers as nodes 0 and 1 of --nnodes 2 on 127.0.0.1 serve dp 1's text (node
#     1 serves no HTTP) and both exit 0 after the front's SIGTERM; a node with other flags is
#     refused at the join on both nodes.
# Usage: dp_serve_test.sh DSA_BINARY REPO_ROOT
set -u
dsa="$1"
root="$2"
# shellcheck source=tests/server/server_lib.sh
source "$root/tests/server/server_lib.sh"  # $model, $tmp, ok, bad, start, stop_server, post, url

prompts=("In the beginning God created" "And the king said unto" "The LORD is my shepherd"
  "Now these are the names of the children")

# refused REGEX ARGS...: `dsa serve ARGS` exits non-zero (not by a signal) with one line matching.
refused() {
  local regex=$1 out rc
  shift
  out=$(timeout 60 "$dsa" serve --model "$model" --port 0 "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && [ "$(wc -l <<<"$out")" -eq 1 ] &&
    grep -Eq -- "$regex" <<<"$out"; then
    ok "refused $*: $out"
  else
    bad "refused $*: rc $rc, '$out'"
  fi
}
refused "dp-size = 0: must be in \\[1, 64\\]" --dp-size 0
refused "dp-size = 65: must be in \\[1, 64\\]" --dp 65
refused "ep-size = 3: must divide the model's 4 routed experts" --dp 3 --ep 3
refused "load-chunk-bytes = 1000: must be in \\[1048576, 1073741824\\]" --load-chunk-bytes 1000
# --device cuda with --dp 2 means one process per GPU: without a GPU the backend refuses once,
# before any rank starts.
refused "cuda backend: (built, but no CUDA device|not built)" --dp-size 2 --device cuda
refused "ep-size = 2 with --device cuda: expert parallelism across GPUs has not run" \
  --dp 2 --ep 2 --device cuda

body() { # body PROMPT STREAM
  printf '{"prompt": "%s", "max_tokens": 20, "temperature": 0, "stream": %s%s}' "$1" "$2" \
    "$([ "$2" = true ] && echo ', "stream_options": {"include_usage": true}')"
}
# complete I STREAM: prompt I's [text, completion tokens] as JSON, streamed (SSE) or not.
complete() {
  if [ "$2" = true ]; then
    curl -sN --max-time 120 "$(url /v1/completions)" -d "$(body "${prompts[$1]}" true)" | python3 -c '
import json, sys
text, n = "", None
for line in sys.stdin.read().split("\n"):
    if not line.startswith("data: ") or line == "data: [DONE]":
        continue
    j = json.loads(line[6:])
    if j["choices"]:
        text += j["choices"][0]["text"]
    if j.get("usage"):
        n = j["usage"]["completion_tokens"]
print(json.dumps([text, n]))'
  else
    post /v1/completions "$(body "${prompts[$1]}" false)" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print(json.dumps([r["choices"][0]["text"], r["usage"]["completion_tokens"]]))'
  fi
}

# --- dp 1: the reference -------------------------------------------------------------------------
start dp1 --max-running-requests 4 --load-chunk-bytes 1048576
declare -a expected
for i in "${!prompts[@]}"; do expected[$i]=$(complete "$i" false); done
ok "dp 1: ${#prompts[@]} greedy completions (--load-chunk-bytes 1048576 accepted)"
stop_server dp1

# rank_values NAME: the per-rank gauge's values, rank order, space-separated.
rank_values() {
  curl -s "$(url /metrics)" | awk -v n="$1" 'index($1, n "{dp_rank=") == 1 { print $1, $2 }' |
    sort | awk '{ print $2 }' | paste -sd' '
}

# dp_run NAME N FLAG [ARGS...]: N ranks; every prompt twice at once (streamed and not); each
# equals dp 1.
dp_run() {
  local name=$1 n=$2 flag=$3 i same=0 total=0 got
  shift 3
  start "$name" --max-running-requests 2 "$flag" "$n" "$@"
  for i in "${!prompts[@]}"; do
    complete "$i" false >"$tmp/$name.$i.plain" &
    complete "$i" true >"$tmp/$name.$i.sse" &
  done
  wait_curls
  for i in "${!prompts[@]}"; do
    for kind in plain sse; do
      total=$((total + 1))
      got=$(cat "$tmp/$name.$i.$kind")
      if [ -n "$got" ] && [ "$got" = "${expected[$i]}" ]; then
        same=$((same + 1))
      else
        echo "     prompt $i ($kind): $got, dp 1: ${expected[$i]}"
      fi
    done
  done
  [ "$same" = "$total" ] && ok "$name: $total concurrent requests over $n ranks equal dp 1" ||
    bad "$name: $same of $total concurrent requests equal dp 1"
  local steps placed
  steps=$(rank_values dsa:dp_rank_steps)
  placed=$(rank_values dsa:dp_rank_requests_placed)
  python3 -c '
import sys
steps = [float(x) for x in sys.argv[1].split()]
placed = [float(x) for x in sys.argv[2].split()]
n, total = int(sys.argv[3]), int(sys.argv[4])
assert len(steps) == n and len(set(steps)) == 1 and steps[0] > 0, steps
assert len(placed) == n and sum(placed) == total and sum(1 for p in placed if p > 0) >= 2, placed
' "$steps" "$placed" "$n" "$total" &&
    ok "$name: every rank took the same steps ($steps), requests placed by load ($placed)" ||
    bad "$name: per-rank steps '$steps', placed '$placed'"
  local tokens want_tokens
  tokens=$(metric dsa:generation_tokens_total)
  want_tokens=$(for i in "${!prompts[@]}"; do cat "$tmp/$name.$i.plain" "$tmp/$name.$i.sse"; done |
    python3 -c 'import json, sys; print(sum(json.loads(l)[1] for l in sys.stdin))')
  [ "$tokens" = "$want_tokens" ] && ok "$name: dsa:generation_tokens_total $tokens (every rank)" ||
    bad "$name: dsa:generation_tokens_total $tokens, the responses hold $want_tokens"
  stop_server "$name"
}
wait_curls() { for j in $(jobs -p); do [ "$j" != "$pid" ] && [ "$j" != "${node1:-}" ] && wait "$j"; done; }

dp_run dp2 2 --dp-size
dp_run dp3 3 --data-parallel-size
dp_run dp2ep2 2 --dp-size --ep 2

# --- one process per rank ------------------------------------------------------------------------
# rank_pids LAUNCHER: its children (the rank processes), "pid:rank" each.
rank_pids() {
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c:$(tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | sed -n 's/^DSA_RANK=//p')"
  done
}
# no_ranks_left PORT: no process of that server is left.
no_ranks_left() { ! pgrep -f -- "--port $1 " >/dev/null && ! pgrep -f -- "--port $1\$" >/dev/null; }

dp_run dp2proc 2 --dp-size --dp-processes
grep -q "over 2 DP ranks (placed by load, one process each)" "$tmp/dp2proc.log" &&
  ok "dp2proc: the front says its ranks are processes" || bad "dp2proc: no ready line for processes"
no_ranks_left "$port" && ok "dp2proc: no rank process left after the launcher's exit" ||
  bad "dp2proc: rank processes left: $(pgrep -fa -- "--port $port")"
dp_run dp3proc 3 --dp-size --dp-processes
dp_run dp2ep2proc 2 --dp-size --dp-processes --ep 2

# A rank killed mid-request: the launcher stops the server, naming the rank; the client is answered.
start killrank --dp 2 --dp-processes --max-running-requests 2
long='{"prompt": "In the beginning", "max_tokens": 4000, "temperature": 0, "ignore_eos": true}'
for _ in 1 2; do post /v1/completions "$long" >"$tmp/killrank.$RANDOM" & done
sleep 1.5
victim=$(rank_pids "$pid" | awk -F: '$2 == 1 { print $1 }')
if [ -z "$victim" ]; then
  bad "killrank: no rank 1 among the launcher's children: $(rank_pids "$pid")"
else
  t0=$(date +%s)
  kill -KILL "$victim"
  rc=0
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    bad "killrank: the server still runs 15 s after rank 1 was killed"
    kill -KILL "$pid"
  fi
  wait "$pid" || rc=$?
  wait_curls
  secs=$(($(date +%s) - t0))
  if [ "$rc" -ne 0 ] && grep -q "rank 1 (local rank 1, node 0) was killed by signal 9" "$tmp/killrank.log"; then
    ok "killrank: rank 1 SIGKILLed -> the server stopped in ${secs} s, exit $rc, rank 1 named"
  else
    bad "killrank: exit $rc after ${secs} s; log: $(tail -3 "$tmp/killrank.log")"
  fi
  no_ranks_left "$port" && ok "killrank: no rank process left" ||
    bad "killrank: left: $(pgrep -fa -- "--port $port")"
fi

# Two nodes on one machine: node 0's rank 0 serves HTTP, node 1's launcher runs rank 1 only (it
# starts first and waits for rank 0 at the address).
init="127.0.0.1:$(free_port)"
"$dsa" serve --model "$model" --host 127.0.0.1 --port 0 --dp 2 --nnodes 2 --node-rank 1 \
  --dist-init-addr "$init" --max-running-requests 2 >"$tmp/node1.log" 2>&1 &
node1=$!
pids+=("$node1")
start nodes --dp 2 --nnodes 2 --node-rank 0 --dist-init-addr "$init" --max-running-requests 2
same=0
for i in "${!prompts[@]}"; do complete "$i" false >"$tmp/nodes.$i" & done
wait_curls
for i in "${!prompts[@]}"; do
  [ "$(cat "$tmp/nodes.$i")" = "${expected[$i]}" ] && same=$((same + 1))
done
[ "$same" = "${#prompts[@]}" ] && ok "nodes: ${#prompts[@]} concurrent requests over 2 nodes equal dp 1" ||
  bad "nodes: $same of ${#prompts[@]} requests equal dp 1"
placed=$(rank_values dsa:dp_rank_requests_placed)
[ "$(echo "$placed" | awk '{ print ($2 > 0) }')" = 1 ] && ok "nodes: node 1's rank got requests ($placed)" ||
  bad "nodes: placed '$placed'"
grep -q "listening" "$tmp/node1.log" && bad "nodes: node 1 listened for HTTP" ||
  ok "nodes: node 1 serves no HTTP"
stop_server nodes
rc1=0
for _ in $(seq 1 100); do kill -0 "$node1" 2>/dev/null || break; sleep 0.1; done
wait "$node1" || rc1=$?
[ "$rc1" = 0 ] && ok "nodes: node 1's launcher exits 0 after the front stopped" ||
  bad "nodes: node 1 exit $rc1: $(tail -3 "$tmp/node1.log")"

# A node started with other engine flags is refused at the join, on both nodes.
init="127.0.0.1:$(free_port)"
"$dsa" serve --model "$model" --port 0 --dp 2 --nnodes 2 --node-rank 0 --dist-init-addr "$init" \
  >"$tmp/mis0.log" 2>&1 &
m0=$!
"$dsa" serve --model "$model" --port 0 --dp 2 --nnodes 2 --node-rank 1 --dist-init-addr "$init" \
  --max-running-requests 3 >"$tmp/mis1.log" 2>&1 &
m1=$!
pids+=("$m0" "$m1")
r0=0 r1=0
timeout 60 tail --pid="$m0" -f /dev/null
timeout 60 tail --pid="$m1" -f /dev/null
wait "$m0" || r0=$?
wait "$m1" || r1=$?
if [ "$r0" -ne 0 ] && [ "$r1" -ne 0 ] && grep -q "flags" "$tmp/mis0.log" && grep -q "flags" "$tmp/mis1.log"; then
  ok "mismatch: both nodes refused at the join (exit $r0, $r1)"
else
  bad "mismatch: exits $r0, $r1; $(tail -2 "$tmp/mis0.log") / $(tail -2 "$tmp/mis1.log")"
fi

exit "$fail"
