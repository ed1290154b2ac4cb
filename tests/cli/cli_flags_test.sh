#!/usr/bin/env bash
# Every `dsa generate` flag with bad, edge and extreme values, each under a watchdog: a bad value
# exits non-zero (not by a signal, not by the watchdog) with ONE line on stderr naming the flag;
# an edge value that is legal runs to completion. Then: sampled --json runs over seeds and
# temperatures give valid JSON lines; a prompts file mixing good and bad prompts completes the
# good ones and reports the bad one by index; SIGINT ends a long run within seconds.
# Usage: cli_flags_test.sh DSA_BINARY REPO_ROOT
set -u
dsa="$1"
root="$2"
model="$root/models/tiny-dsa"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { timeout 60 "$dsa" generate --model "$model" "$@"; }
# The flags a case leaves out: a prompt, a short output, the model.
defaults() {
  local args=" $* " d=()
  [[ "$args" == *" --prompt "* || "$args" == *" --prompts-file "* ]] || d+=(--prompt "$1")
  [[ "$args" == *" --max-new-tokens "* ]] || d+=(--max-new-tokens 2)
  [[ "$args" == *" --model "* ]] || d+=(--model "$model")
  printf '%s\0' "${d[@]}"
}

bad() {  # bad "regex" args...: refused with one line naming the problem
  local regex="$1" out rc
  shift
  mapfile -d '' -t d < <(defaults "Hi" "$@")
  out=$(timeout 60 "$dsa" generate "${d[@]}" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
    echo "FAIL (rc=$rc): $*"
    fail=1
  elif ! grep -Eq -- "$regex" <<<"$out" || [ "$(wc -l <<<"$out")" -ne 1 ]; then
    echo "FAIL (wanted one line matching /$regex/, got '$out'): $*"
    fail=1
  else
    echo "ok  bad  $*: $out"
  fi
}

good() {  # good args...: a legal (edge) value runs to completion
  local out rc
  mapfile -d '' -t d < <(defaults "And the king" "$@")
  out=$(timeout 60 "$dsa" generate "${d[@]}" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL (rc=$rc, '$out'): $*"
    fail=1
  else
    echo "ok  good $*"
  fi
}

big=99999999999999999999
bad "max-running-requests = 0" --max-running-requests 0
bad "max-running-requests = 0" --max-batch 0
bad "max-running-requests = -5" --max-running-requests -5
bad "max-running-requests = 100000" --max-running-requests 100000
bad "max-running-requests.*range" --max-running-requests $big
bad "context-length = 1" --context-length 1
bad "context-length = 1000000" --context-length 1000000
bad "context-length = 163841" --max-context 163841
bad "context-length = -1" --context-length -1
bad "max-new-tokens = 0" --max-new-tokens 0
bad "max-new-tokens = 2147483647" --max-new-tokens 2147483647
bad "max-new-tokens = 2048" --context-length 2048 --max-new-tokens 2048
bad "max-new-tokens" --max-new-tokens abc
bad "chunked-prefill-size = 0" --chunked-prefill-size 0
bad "chunked-prefill-size = 2000" --chunked-prefill-size 2000 --max-prefill-tokens 1000
bad "max-prefill-tokens = 0" --max-prefill-tokens 0
bad "max-prefill-tokens = 1073741824" --max-prefill-tokens 1073741824
bad "speculative-num-draft-tokens = -9223372036854775808" --speculative-algorithm NEXTN --speculative-num-draft-tokens -9223372036854775808
bad "speculative-num-steps = 9223372036854775807" --speculative-algorithm NEXTN --speculative-num-steps 9223372036854775807 --speculative-num-draft-tokens 3
bad "mem-fraction-static = 0" --mem-fraction-static 0
bad "mem-fraction-static = 1.5" --mem-fraction-static 1.5
bad "mem-fraction-static = nan" --mem-fraction-static nan
bad "mem-fraction-static 1e-12" --mem-fraction-static 1e-12
bad "kv-cache-dtype = fp8_e5m2" --kv-cache-dtype fp8_e5m2
bad "kv-cache-dtype = int4" --kv-cache-dtype int4
bad "speculative-num-draft-tokens = 3 needs --speculative-algorithm" --speculative-num-draft-tokens 3
bad "speculative-num-steps = 2 needs" --speculative-num-steps 2
bad "speculative-eagle-topk = 4 needs" --speculative-eagle-topk 4
bad "speculative-algorithm = MEDUSA" --speculative-algorithm MEDUSA
bad "speculative-eagle-topk = 2: only 1" --speculative-algorithm EAGLE --speculative-eagle-topk 2
bad "speculative-num-steps = 0" --speculative-algorithm NEXTN --speculative-num-steps 0
bad "speculative-num-steps = 8" --speculative-algorithm NEXTN --speculative-num-steps 8
bad "speculative-num-steps = -1" --speculative-algorithm NEXTN --speculative-num-steps -1
bad "speculative-num-draft-tokens = 1" --speculative-algorithm NEXTN --speculative-num-draft-tokens 1
bad "speculative-num-draft-tokens = 9" --speculative-algorithm NEXTN --speculative-num-draft-tokens 9
bad "steps \\+ 1 = 4" --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-num-draft-tokens 3
bad "temperature = -1" --temperature -1
bad "temperature = inf" --temperature inf
bad "temperature = nan" --temperature nan
bad "top-p = 0" --top-p 0
bad "top-p = 1.5" --top-p 1.5
bad "top-k = -1" --top-k -1
bad "top-k = 4294967296" --top-k 4294967296
bad "seed = -1" --seed -1
bad "seed.*range" --seed $big
bad "stop #1 is empty" --stop ""
bad "stop #2: not valid UTF-8" --stop "ok" --stop $'\xe4'
bad "max-prefill-tokens = 65537" --max-prefill-tokens 65537
bad "stop-token-ids = 6144" --stop-token-ids 6144
bad "stop-token-ids = -2" --stop-token-ids -2
bad "device" --device tpu
bad "mtp-chain-hidden" --mtp-chain-hidden middle
bad "no such model directory" --model "$root/does-not-exist"
bad "prompts-file .*: is a directory" --prompts-file "$root/testdata"
bad "prompt is empty" --prompt ""
bad "longer than the context" --prompt "$(printf 'word %.0s' $(seq 1 700))" --context-length 256
bad "unknown|extra|not expected|The following argument" --max-batchh 3

good --max-running-requests 1
good --max-running-requests 4096
good --context-length 4 --prompt "A" --max-new-tokens 1
bad "longer than the context" --context-length 2 --max-new-tokens 1
good --context-length 163840 --mem-fraction-static 0.5
good --chunked-prefill-size 1
good --max-prefill-tokens 1 --chunked-prefill-size 1
good --mem-fraction-static 1
# The loader's staging chunk (issue 16): [1 MiB, 1 GiB], named with the value when outside.
bad "load-chunk-bytes = 1000: must be in \\[1048576, 1073741824\\]" --load-chunk-bytes 1000
bad "load-chunk-bytes = 2147483648" --load-chunk-bytes 2147483648
bad "load-chunk-bytes.*range" --load-chunk-bytes $big
bad "load-chunk-bytes.*not an integer" --load-chunk-bytes 64M
bad "load-threads = 0: must be in \\[1, 64\\]" --load-threads 0
bad "load-threads = 65: must be in \\[1, 64\\]" --load-threads 65
good --load-chunk-bytes 1048576
good --load-chunk-bytes 1073741824
good --kv-cache-dtype fp8_e4m3
good --kv-cache-dtype bfloat16
good --speculative-algorithm EAGLE
good --speculative-algorithm nextn --speculative-num-steps 7
good --speculative-algorithm NEXTN --speculative-num-draft-tokens 2
good --speculative-algorithm NEXTN --speculative-num-steps 1 --speculative-num-draft-tokens 2 --speculative-eagle-topk 1
good --temperature 1000000 --seed 9223372036854775807
good --top-k 2147483647 --top-p 1e-30 --temperature 1
good --stop-token-ids 0 --stop "the" --stop "LORD" --ignore-eos
good --disable-cuda-graph
good --skip-warmup
good --no-graphs --max-batch 2 --max-context 64

# Sampled --json over seeds and temperatures: every line is a JSON object, the last the summary.
for t in 0.7 1.5 3.0; do
  for seed in 1 2 3 4 5 6 7 8; do
    out=$(run --prompt "And the" --max-new-tokens 24 --temperature "$t" --seed "$seed" \
      --speculative-algorithm NEXTN --json 2>"$tmp/err")
    rc=$?
    if [ "$rc" -ne 0 ] || ! python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
objs = [json.loads(l) for l in lines]
assert len(objs) == 2 and "summary" in objs[1], objs
r = objs[0]
for k in ("index", "prompt_tokens", "completion_tokens", "ttft_s", "e2e_latency_s", "finish_reason", "text"):
    assert k in r, k
r["text"].encode("utf-8")
' <<<"$out"; then
      echo "FAIL (rc=$rc, invalid JSON at T=$t seed=$seed): $(head -c 300 <<<"$out") $(cat "$tmp/err")"
      fail=1
    fi
  done
done
echo "ok  sampled --json: 24 runs parse"

# --profile-device-time: the summary's device_time splits each decode step into its forwards and
# the rest; every forward the step runs is there (a d = 3 step: the verify, the draft extend and
# the draft decodes), and the forwards fit inside the steps.
out=$(run --prompts-file <(printf 'And the king\nIn the beginning\n') --max-new-tokens 12 \
  --speculative-algorithm NEXTN --speculative-num-steps 3 --json --profile-device-time 2>"$tmp/err")
rc=$?
if [ "$rc" -ne 0 ] || ! python3 -c '
import json, sys
s = json.loads(sys.stdin.read().splitlines()[-1])["summary"]
t = s["device_time"]
assert t["decode_steps"] > 0 and t["step_ms"] > 0, t
assert 0 < t["forwards_ms_per_step"] <= t["step_ms"] + 1e-9, t
assert abs(t["forwards_ms_per_step"] + t["other_ms_per_step"] - t["step_ms"]) < 1e-6, t
kinds = {(k["model"], k["mode"]): k for k in t["kinds"]}
for k in (("target", "target_verify"), ("mtp", "draft_extend"), ("mtp", "decode")):
    assert k in kinds and kinds[k]["ms_each"] > 0, (k, kinds)
assert kinds[("target", "target_verify")]["forwards"] == t["decode_steps"], (kinds, t)
' <<<"$out"; then
  echo "FAIL (rc=$rc): --profile-device-time: $(tail -c 600 <<<"$out") $(cat "$tmp/err")"
  fail=1
else
  echo "ok  --profile-device-time: device_time per step and per forward"
fi
if run --prompt "And" --max-new-tokens 2 --profile-device-time --dp-size 2 >/dev/null 2>"$tmp/err" ||
  ! grep -q "profile-device-time with --dp-size = 2" "$tmp/err"; then
  echo "FAIL: --profile-device-time --dp-size 2 not refused by name: $(cat "$tmp/err")"
  fail=1
fi

# A prompts file mixing good and bad prompts: the good ones complete, the bad one is reported.
{
  echo "And the king said unto"
  printf 'word %.0s' $(seq 1 700)
  echo
  echo "In the beginning"
} >"$tmp/mixed.txt"
out=$(run --prompts-file "$tmp/mixed.txt" --max-new-tokens 4 --context-length 256 --json 2>/dev/null)
rc=$?
if [ "$rc" -ne 1 ] || ! python3 -c '
import json, sys
objs = [json.loads(l) for l in sys.stdin.read().splitlines()]
errs = [o for o in objs if "error" in o]
done = [o for o in objs if "completion_tokens" in o]
assert len(errs) == 1 and errs[0]["index"] == 1 and "longer than the context" in errs[0]["error"], errs
assert sorted(o["index"] for o in done) == [0, 2], done
assert objs[-1]["summary"]["requests_failed"] == 1
' <<<"$out"; then
  echo "FAIL (rc=$rc): mixed prompts file: $out"
  fail=1
else
  echo "ok  mixed prompts file: 2 completed, 1 refused by index, rc 1"
fi

# SIGINT (twice at once): a long run stops within seconds, non-zero, with what finished already
# written.
for i in $(seq 1 12); do echo "And it came to pass $i"; done >"$tmp/many.txt"
# --foreground: GNU timeout would forward the signal to its whole process group as well, and a
# second SIGINT ends dsa at once by design (its handler restores the default after the first).
timeout --foreground 60 "$dsa" generate --model "$model" --prompts-file "$tmp/many.txt" --max-new-tokens 200 \
  --max-running-requests 2 --ignore-eos --json >"$tmp/int.out" 2>"$tmp/int.err" &
pid=$!
for _ in $(seq 1 300); do  # signal once the run is under way (after the first token is out)
  [ -s "$tmp/int.out" ] && break
  sleep 0.1
done
sleep 1
start=$(date +%s)
kill -INT "$pid"
kill -INT "$pid"  # delivered twice at once (as by a process manager): still one clean stop
wait "$pid"
rc=$?
took=$(($(date +%s) - start))
if [ "$rc" -ne 130 ] || [ "$took" -gt 5 ] || ! grep -q "interrupted (SIGINT)" "$tmp/int.err" ||
  ! grep -q completion_tokens "$tmp/int.out"; then
  echo "FAIL (rc=$rc after ${took}s): SIGINT: $(cat "$tmp/int.err")"
  fail=1
else
  echo "ok  SIGINT: exit 130 after ${took}s; $(grep -c completion_tokens "$tmp/int.out") finished results written"
fi
exit $fail
