#!/usr/bin/env bash
# Stop 46, call 2: the narrow checkpoint's teacher-forced cases after call 1 (FP8: bounds from the
# e4m3 amplification; the bf16 control, new; by depth), and `dsa serve` with one process per rank
# on cuda at world size 1 (NCCL through the bootstrap, the front's exchange over NcclGroup) against
# the plain server's greedy text. Bundled into $OUT/call2.tgz. Carry [".deps"].
set -u
W=/tmp/call2; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call2.tgz" -C /tmp call2; }
. scripts/gpu_build_env.sh
gpu_env "$W/env.txt" | head -3
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 --target dsa narrow_checkpoint_cuda_test > "$W/build.log" 2>&1 || { echo BUILD FAIL; grep error -A3 "$W/build.log" | head; bundle; exit 1; }
echo "build $(el) s"
t=$(find build-gpu -name narrow_checkpoint_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 150 "$t" --gtest_filter="*TeacherForced*" > "$W/narrow.log" 2>&1; echo "narrow rc=$?"
grep -E "teacher-forced:|OK \]|FAILED \]|Failure|Expected|actual" "$W/narrow.log" | head -24
bundle
echo "== dsa serve over one rank process on cuda ($(el) s)"
dsa=build-gpu/dsa/cli/dsa
body='{"prompt": "And the king said unto", "max_tokens": 24, "temperature": 0}'
serve_once() {  # NAME ARGS...: start, one completion, SIGTERM; prints the text and the exit code
  local name=$1 port=$((31000 + RANDOM % 2000)) pid rc=0 code=""
  shift
  $dsa serve --model models/tiny-dsa --device cuda --port $port --speculative-algorithm NEXTN \
    --speculative-num-steps 3 "$@" > "$W/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1
  done
  curl -s --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$body" > "$W/$name.json"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "dp_rank_steps|generation_tokens_total " > "$W/$name.metrics"
  kill -TERM $pid; wait $pid || rc=$?
  echo "$name: health $code, exit $rc, text $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["text"]))' "$W/$name.json" 2>/dev/null)"
}
serve_once plain
serve_once ranks1 --dp 1 --dp-processes
a=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$W/plain.json" 2>/dev/null)
b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$W/ranks1.json" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "serve over NCCL world 1: text equals the plain server's" || echo "serve over NCCL world 1: TEXT DIFFERS"
grep -E "starting|ready|graph|error|failed" "$W/ranks1.log" | head -6; cat "$W/ranks1.metrics"
bundle; echo "all done $(el) s"
