#!/usr/bin/env bash
# `dsa serve --dp-size N` on 127.0.0.1 with the tiny model (CPU, in-process ranks):
#   - --dp-size out of range, --dp-size > 1 with --device cuda (one process per GPU is built for
#     `dsa generate` only) and a bad --load-chunk-bytes are refused with one line naming the flag and value;
#   - dp 1 (with a legal --load-chunk-bytes) gives each prompt's greedy completion;
#   - dp 2 (--dp-size) and dp 3 (--data-parallel-size): concurrent requests, streamed and not, all
#     complete with dp 1's text and token count;
#   - dp 2 with --ep 2 (the ranks split the MoE's experts, model/expert_parallel.h): the same;
#     --ep 3 (not dividing the 4 experts) is refused;
#   - /metrics: the per-rank gauges show every rank took the same steps, requests were placed on
#     more than one rank, and the totals count every token;
#   - SIGTERM: exit 0.
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
# --device cuda with --dp 2: one process per GPU is built for generate only; serve says so.
refused "dp-size = 2 with --device cuda: dsa serve runs its data-parallel ranks in one process" \
  --dp-size 2 --device cuda

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
wait_curls() { for j in $(jobs -p); do [ "$j" != "$pid" ] && wait "$j"; done; }

dp_run dp2 2 --dp-size
dp_run dp3 3 --data-parallel-size
dp_run dp2ep2 2 --dp-size --ep 2

exit "$fail"
