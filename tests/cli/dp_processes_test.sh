#!/usr/bin/env bash
# `dsa generate --dp-processes` on the CPU (issue 18): one process per data-parallel rank, started
# by dsa itself (dist/launcher.h), joined over TCP (dist/socket_group.h), each running the requests
# the shared placement gives it (cli/generate_ranks.h). Greedy, d = 0 and d = 3: every prompt's
# tokens at --dp 2 (five prompts) and --dp 3 (two prompts: a rank idles the whole run) equal
# --dp 1's and the in-process ranks'; one summary per rank, labelled, with equal steps and every
# request placed once; the text output is one stream, rank by rank; --dp 1 runs as one process;
# --ep N across the rank processes gives the same tokens; two launchers as two nodes on loopback
# (--nnodes 2) give --dp 1's tokens, node 0 writing all; a rank killed mid-run stops the others
# and is named (no hang); SIGINT stops every rank after the
# same step (exit 130, both ranks' summaries written); sampled tokens (temperature, top-p, top-k)
# are the same on one rank, on in-process ranks and on rank processes, d = 0 and 3; refusals name
# the flag.
# Usage: dp_processes_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
model="$root/models/tiny-dsa"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/cli/expect_lib.sh
. "$root/tests/cli/expect_lib.sh"
head -n 5 "$root/testdata/heldout.txt" >"$tmp/five"
head -n 2 "$root/testdata/heldout.txt" >"$tmp/two"

gen() { # gen OUT PROMPTS DP D [FLAGS...]
  local out=$1 prompts=$2 dp=$3 d=$4 spec=()
  shift 4
  [ "$d" -gt 0 ] && spec=(--speculative-algorithm NEXTN --speculative-num-steps "$d")
  timeout 180 "$dsa" generate --model "$model" --prompts-file "$prompts" --max-new-tokens 8 \
    --json --dp "$dp" "${spec[@]}" "$@" >"$out" 2>"$out.err" ||
    { echo "FAIL: generate dp $dp d $d $*: rc $?"; tail -3 "$out.err"; fail=1; }
}
# "rank steps requests" of each summary, in output order.
ranks() { sed -n 's/.*"dp":{"rank":\([0-9]*\),"requests_per_rank":\[\([0-9,]*\)\],"steps_per_rank":\[\([0-9,]*\)\].*/\1 \3 \2/p' "$1"; }

for d in 0 3; do
  for run in "five 2" "two 3"; do
    set -- $run
    set_=$1 dp=$2 n=$(wc -l <"$tmp/$1")
    gen "$tmp/one.$set_.$d" "$tmp/$set_" 1 "$d"
    gen "$tmp/thr.$set_.$d" "$tmp/$set_" "$dp" "$d"
    gen "$tmp/proc.$set_.$d" "$tmp/$set_" "$dp" "$d" --dp-processes
    want=$(tokens "$tmp/one.$set_.$d") got=$(tokens "$tmp/proc.$set_.$d")
    expect "d $d, $n prompts: --dp $dp --dp-processes gives --dp 1's tokens per prompt" \
      '[ "$(wc -l <<<"$want")" -eq "$n" ] && [ "$got" = "$want" ]'
    expect "d $d, $n prompts: ... and the in-process ranks' tokens" \
      '[ "$got" = "$(tokens "$tmp/thr.$set_.$d")" ]'
    r=$(ranks "$tmp/proc.$set_.$d")
    expect "d $d, --dp $dp: one summary per rank, in rank order ($(tr '\n' ';' <<<"$r"))" \
      '[ "$(cut -d" " -f1 <<<"$r" | tr -d "\n")" = "$(seq -s "" 0 $((dp - 1)))" ]'
    expect "d $d, --dp $dp: every rank took the same steps, more than 0" \
      '[ "$(cut -d" " -f2 <<<"$r" | tr , "\n" | sort -u | wc -l)" -eq 1 ] && [ "$(cut -d" " -f2 <<<"$r" | head -1 | cut -d, -f1)" -gt 0 ]'
    reqs=$(cut -d" " -f3 <<<"$r" | head -1)
    expect "d $d, --dp $dp: every request placed once ($reqs)" \
      '[ "$(tr , "\n" <<<"$reqs" | awk "{s+=\$1} END {print s}")" -eq "$n" ]'
    [ "$dp" -gt "$n" ] && expect "d $d: $dp ranks for $n prompts leave a rank idle" \
      'tr , "\n" <<<"$reqs" | grep -qx 0'
    expect "d $d, --dp $dp: the launcher says it starts $dp processes" \
      'grep -q "starting $dp rank processes" "$tmp/proc.$set_.$d.err"'
  done
done

# Expert parallelism across rank processes: each rank computes its half of the routed experts for
# both ranks' rows over SocketGroup's host-memory all-gather and reduce-scatter
# (model/expert_parallel.h), exactly: --dp 1's tokens, d = 0 and 3, and the same with a rank idle.
for d in 0 3; do
  gen "$tmp/ep.$d" "$tmp/five" 2 "$d" --ep 2 --dp-processes
  expect "d $d: --dp 2 --ep 2 --dp-processes gives --dp 1's tokens" \
    '[ "$(tokens "$tmp/ep.$d")" = "$(tokens "$tmp/one.five.$d")" ]'
done
gen "$tmp/ep.idle" "$tmp/two" 4 3 --ep 4 --dp-processes
expect "d 3: --dp 4 --ep 4 --dp-processes over two prompts (two ranks idle) gives --dp 1's tokens" \
  '[ "$(tokens "$tmp/ep.idle")" = "$(tokens "$tmp/one.two.3")" ]'

# Sampling is keyed by (seed, request, position) (SPEC.md §6.3), never by the rank, the batch slot
# or the step: the same sampled tokens on one rank, on in-process ranks and on rank processes, with
# and without MTP (issue 18 item 4: ranks that must agree do; a peer's drafter did not).
sampled=(--temperature 0.9 --top-p 0.95 --top-k 50 --seed 11)
gen "$tmp/s.one" "$tmp/five" 1 0 "${sampled[@]}"
gen "$tmp/s.thr" "$tmp/five" 2 3 "${sampled[@]}"
gen "$tmp/s.proc0" "$tmp/five" 3 0 "${sampled[@]}" --dp-processes
gen "$tmp/s.proc3" "$tmp/five" 2 3 "${sampled[@]}" --dp-processes
want=$(tokens "$tmp/s.one")
expect "sampled: --dp 1's tokens at --dp 2 (d 3), --dp 3 processes (d 0), --dp 2 processes (d 3)" \
  '[ "$(wc -l <<<"$want")" -eq 5 ] && [ "$(tokens "$tmp/s.thr")" = "$want" ] && [ "$(tokens "$tmp/s.proc0")" = "$want" ] && [ "$(tokens "$tmp/s.proc3")" = "$want" ]'
expect "sampled: another seed gives other tokens (the check can fail)" \
  'gen "$tmp/s.other" "$tmp/five" 1 0 --temperature 0.9 --top-p 0.95 --top-k 50 --seed 12 && [ "$(tokens "$tmp/s.other")" != "$want" ]'

# Text output: every request once, then the ranks' labels in rank order.
timeout 120 "$dsa" generate --model "$model" --prompts-file "$tmp/five" --max-new-tokens 4 \
  --dp 2 --dp-processes >"$tmp/text" 2>/dev/null
expect "text output: 5 requests, each once" \
  '[ "$(grep -o "^--- request [0-9]*" "$tmp/text" | sort -u | wc -l)" -eq 5 ] && [ "$(grep -c "^--- request" "$tmp/text")" -eq 5 ]'
expect "text output: rank 0's summary, then rank 1's" \
  '[ "$(grep -o "^\[dp rank [0-9] of 2" "$tmp/text" | tr -d "\n")" = "[dp rank 0 of 2[dp rank 1 of 2" ]'
expect "--dp 1 --dp-processes: one rank process, the prompt's --dp 1 tokens" \
  'gen "$tmp/solo" "$tmp/two" 1 0 --dp-processes && [ "$(tokens "$tmp/solo")" = "$(tokens "$tmp/one.two.0")" ] && grep -q "starting 1 rank processes" "$tmp/solo.err"'

# Two "nodes" on loopback (docs/multi_gpu.md, "Multi-node"): two launchers with --nnodes 2,
# their --node-rank and one --dist-init-addr, each starting its half of the ranks. Rank 0's node
# writes every rank's output (gathered through the group: nodes share no files); node 1 writes
# none. d = 3, --dp 2 (a rank a node) and --dp 4 (two a node, rank 3 idle over three prompts).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
head -n 3 "$root/testdata/heldout.txt" >"$tmp/three"
gen "$tmp/one.three.3" "$tmp/three" 1 3
for dp in 2 4; do
  addr=127.0.0.1:$(free_port)
  nodes=(--nnodes 2 --dist-init-addr "$addr")
  gen "$tmp/n1.$dp" "$tmp/three" "$dp" 3 "${nodes[@]}" --node-rank 1 &
  node1=$!
  gen "$tmp/n0.$dp" "$tmp/three" "$dp" 3 "${nodes[@]}" --node-rank 0
  wait "$node1"
  r=$(ranks "$tmp/n0.$dp")
  expect "two nodes, --dp $dp: node 0 writes every prompt with --dp 1's tokens" \
    '[ "$(tokens "$tmp/one.three.3" | wc -l)" -eq 3 ] && [ "$(tokens "$tmp/n0.$dp")" = "$(tokens "$tmp/one.three.3")" ]'
  expect "two nodes, --dp $dp: node 0 writes the $dp ranks' summaries in rank order, node 1 nothing" \
    '[ "$(cut -d" " -f1 <<<"$r" | tr -d "\n")" = "$(seq -s "" 0 $((dp - 1)))" ] && [ ! -s "$tmp/n1.$dp" ]'
  expect "two nodes, --dp $dp: each launcher names its ranks" \
    'grep -q "node 0 of 2: starting ranks 0..$((dp / 2 - 1)) of $dp" "$tmp/n0.$dp.err" && grep -q "node 1 of 2: starting ranks $((dp / 2))..$((dp - 1)) of $dp" "$tmp/n1.$dp.err"'
done
# A node with other flags is refused by rank 0 at the join (the flags hash), on both nodes.
addr=127.0.0.1:$(free_port)
timeout 120 "$dsa" generate --model "$model" --prompts-file "$tmp/three" --max-new-tokens 9 \
  --dp 2 --nnodes 2 --node-rank 1 --dist-init-addr "$addr" >/dev/null 2>"$tmp/nm1.err" &
node1=$!
timeout 120 "$dsa" generate --model "$model" --prompts-file "$tmp/three" --max-new-tokens 8 \
  --dp 2 --nnodes 2 --node-rank 0 --dist-init-addr "$addr" >/dev/null 2>"$tmp/nm0.err"
rc0=$?
wait "$node1"
rc1=$?
expect "two nodes with different flags: both exit 1 (got $rc0, $rc1), the hash mismatch named" \
  '[ "$rc0" -eq 1 ] && [ "$rc1" -eq 1 ] && grep -q "runs with other flags" "$tmp/nm0.err" && grep -q "runs with other flags" "$tmp/nm1.err"'
# A node that dies mid-run (its launcher SIGKILLed, its ranks with it: PR_SET_PDEATHSIG): node 0
# stops within seconds and names the lost rank; nothing hangs. How rank 0's socket learns of the
# loss depends on where it was: an orderly close, a reset on read, or a failed send of a result
# (CI, 2026-12-07: not the close), and each message names rank 1.
addr=127.0.0.1:$(free_port)
nlong=(--model "$model" --prompts-file "$tmp/three" --max-new-tokens 400 --ignore-eos --dp 2
  --nnodes 2 --dist-init-addr "$addr")
"$dsa" generate "${nlong[@]}" --node-rank 1 >/dev/null 2>"$tmp/nk1.err" &
node1=$!
timeout 120 "$dsa" generate "${nlong[@]}" --node-rank 0 >"$tmp/nk0" 2>"$tmp/nk0.err" &
node0=$!
for _ in $(seq 300); do # until both nodes run their rank, or 30 s
  grep -q "starting ranks" "$tmp/nk0.err" && [ "$(pgrep -P "$node1" | wc -l)" -eq 1 ] && break
  sleep 0.1
done
sleep 3
t0=$(date +%s)
kill -9 "$node1"
wait "$node0"
rc=$?
took=$(($(date +%s) - t0))
expect "node 1 killed mid-run: node 0 exits 1 in ${took} s (< 60, got rc $rc), naming the lost rank: $(tail -1 "$tmp/nk0.err")" \
  '[ "$rc" -eq 1 ] && [ "$took" -lt 60 ] && grep -Eq "rank 1 (closed its connection|could not be read from)|sending the result to rank 1" "$tmp/nk0.err"'
refused "--dp-size = 3 with --nnodes = 2: the ranks are split evenly over the nodes" \
  --prompt Hi --dp 3 --nnodes 2 --dist-init-addr 127.0.0.1:9
refused "--nnodes = 2 needs --dist-init-addr" --prompt Hi --dp 2 --nnodes 2

# start_long OUT: the long run in the background, $launcher its pid (the dsa launcher itself, so
# its children are the ranks), a guard that kills it after 120 s; returns once both ranks run.
long=(--prompts-file "$tmp/five" --max-new-tokens 400 --ignore-eos --dp 2 --dp-processes)
start_long() {
  "$dsa" generate --model "$model" "${long[@]}" >"$1" 2>"$1.err" &
  launcher=$!
  # The guard's sleep must not outlive the test holding its output open: stop_guard's SIGTERM
  # ends the guard and its sleep.
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep 120 &
    s=$!
    wait "$s" && kill -9 "$launcher" 2>/dev/null
  ) &
  guard=$!
  for _ in $(seq 100); do
    [ "$(pgrep -P "$launcher" | wc -l)" -eq 2 ] && break
    sleep 0.1
  done
  sleep 1
}
stop_guard() { kill "$guard" 2>/dev/null; }
# The child of the launcher whose environment says DSA_RANK=$1.
rank_pid() {
  local p
  for p in $(pgrep -P "$launcher"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DSA_RANK=$1" && echo "$p"
  done
}
# A rank killed mid-run: the launcher stops the other and names the dead one; nothing hangs.
start_long "$tmp/kill.out"
kill -9 "$(rank_pid 1)"
wait "$launcher"
rc=$?
stop_guard
expect "a rank killed: exit 1 (got $rc), the rank named with its signal" \
  '[ "$rc" -eq 1 ] && grep -q "rank 1 (local rank 1, node 0) was killed by signal 9" "$tmp/kill.out.err"'
# SIGINT to the launcher: forwarded; the ranks vote to stop and leave after the same step.
start_long "$tmp/int.out"
kill -INT "$launcher"
wait "$launcher"
rc=$?
stop_guard
expect "SIGINT: exit 130 (got $rc), both ranks' summaries written, the stop said" \
  '[ "$rc" -eq 130 ] && [ "$(grep -c "^\[dp rank" "$tmp/int.out")" -eq 2 ] && grep -q "interrupted: the 2 ranks stopped after the same step" "$tmp/int.out.err"'

refused "--ep-size = 2 with --device cuda: expert parallelism across GPUs has not run" \
  --prompt Hi --dp 2 --ep 2 --device cuda
refused "--prompts-file /dev/fd/[0-9]+ with one process per rank: must be a regular file" \
  --prompts-file <(echo Hi) --dp 2 --dp-processes
refused "--profile-device-time with --dp-size = 2" --prompt Hi --dp 2 --dp-processes --profile-device-time
expect "a half-set rank environment is refused, naming the variable" 'DSA_RANK=0 timeout 60 "$dsa" generate --model "$model" --prompt Hi --dp 2 --dp-processes 2>&1 | grep -q "DSA_LOCAL_RANK is not set"'
exit $fail
