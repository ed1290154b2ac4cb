#!/usr/bin/env bash
# Stop 47, call 2 (same warm machine as call 1, so build-gpu is reused): issue 16's FP8 GEMM table
# on this GPU (linear_bench fp8), the README prompt d = 0 against d = 3 (issue 15's "done when"),
# the decode step kernel by kernel (scripts/trace_step.sh, CUPTI), and `dsa serve` over one rank process on cuda at world size 1 against the plain server. The GPU
# image has no cpp-httplib / prometheus-cpp, so the server binary is carried: build-serve/serve.tar.xz
# holds dsa built by CI's clone of b3a60e1 on the CPU machine (CUDA for sm_90a, NCCL, server) and
# its libraries less NCCL, cuBLAS, OpenSSL and zlib (the device's). Carry [".deps", "build-serve"].
set -u
W=/tmp/call2; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call2.tgz" -C /tmp call2; }
. scripts/gpu_build_env.sh
gpu_env "$W/env.txt" | head -3
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 --target dsa linear_bench > "$W/build.log" 2>&1 || { echo BUILD FAIL; grep error -A3 "$W/build.log" | head; bundle; exit 1; }
echo "build $(el) s"
REPEAT=3 timeout 100 scripts/bench_readme.sh build-gpu > "$W/readme.log" 2>&1; echo "readme rc=$?"
tail -12 "$W/readme.log"; bundle
echo "== dsa serve over one rank process on cuda ($(el) s)"
nccl=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
cublas=$(dirname "$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)")
tar xJf build-serve/serve.tar.xz -C build-serve
sdsa=build-serve/dsa
body='{"prompt": "And the king said unto", "max_tokens": 24, "temperature": 0}'
serve_once() {  # NAME ARGS...: start, one completion, SIGTERM; prints the text and the exit code
  local name=$1 port=$((31000 + RANDOM % 2000)) pid rc=0 code=""
  shift
  LD_LIBRARY_PATH="$PWD/build-serve/libs:$nccl:$cublas:${LD_LIBRARY_PATH:-}" \
    $sdsa serve --model models/tiny-dsa --device cuda --port $port --speculative-algorithm NEXTN \
    --speculative-num-steps 3 "$@" > "$W/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1
  done
  curl -s --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$body" > "$W/$name.json"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "dp_rank|generation_tokens_total |graph" > "$W/$name.metrics"
  kill -TERM $pid; wait $pid || rc=$?
  echo "$name: health $code, exit $rc, text $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["text"]))' "$W/$name.json" 2>/dev/null)"
  tail -2 "$W/$name.log"
}
serve_once plain
serve_once ranks1 --dp 1 --dp-processes
a=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$W/plain.json" 2>/dev/null)
b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$W/ranks1.json" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "serve over NCCL world 1: text equals the plain server's" || echo "serve over NCCL world 1: TEXT DIFFERS"
grep -E "starting|ready|rank" "$W/ranks1.log" | head -4; cat "$W/ranks1.metrics"
LD_LIBRARY_PATH="$PWD/build-serve/libs:$nccl:$cublas" timeout 60 $sdsa serve --model models/tiny-dsa --device cuda --port 0 --dp 2 > "$W/dp2.log" 2>&1; echo "dp 2 on one GPU: rc=$? $(grep -m1 -E 'GPU|rank 1' "$W/dp2.log")"
bundle
echo "== the decode step kernel by kernel, README prompt, d = 0 and 3 ($(el) s)"
timeout 120 scripts/trace_step.sh build-gpu "$W/trace" > "$W/trace.log" 2>&1; echo "trace rc=$?"
cat "$W/trace.log"; rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle
echo "== linear_bench fp8 ($(el) s)"
b=$(find build-gpu -name linear_bench -type f -executable | head -1)
timeout 200 "$b" fp8 1 4 32 128 4096 > "$W/linear_bench.log" 2>&1; echo "linear rc=$?"
grep -vE "^\s*$" "$W/linear_bench.log" | tail -40
bundle; echo "all done $(el) s"
