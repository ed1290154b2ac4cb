#!/usr/bin/env bash
# Stop 46, call 3: the narrow teacher-forced cases with the bounds written after calls 1-2 (FP8,
# the bf16 control, by depth), and `dsa serve` over one rank process on cuda at world size 1. The
# GPU image has no cpp-httplib / prometheus-cpp, so the server binary is carried: build-serve/dsa,
# built by CI's clone of 0aefc07 on the CPU machine (CUDA backend for sm_90a, NCCL), with its
# libraries in build-serve/libs (NCCL, cuBLAS, OpenSSL and zlib are the device's), packed as
# build-serve/serve.tar.xz to fit the 64 MiB a call carries. Carry [".deps", "build-serve"].
set -u
W=/tmp/call3; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call3.tgz" -C /tmp call3; }
. scripts/gpu_build_env.sh
gpu_env "$W/env.txt" | head -3
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 --target narrow_checkpoint_cuda_test dsa > "$W/build.log" 2>&1 || { echo BUILD FAIL; grep error -A3 "$W/build.log" | head; bundle; exit 1; }
echo "build $(el) s"
t=$(find build-gpu -name narrow_checkpoint_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 150 "$t" --gtest_filter="*TeacherForced*" > "$W/narrow.log" 2>&1; echo "narrow rc=$?"
grep -E "teacher-forced:|OK \]|FAILED \]|Failure|Expected|actual" "$W/narrow.log" | head -24
bundle
echo "== dsa serve over one rank process on cuda ($(el) s)"
nccl=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
cublas=$(dirname "$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)")
tar xJf build-serve/serve.tar.xz -C build-serve
export LD_LIBRARY_PATH="$PWD/build-serve/libs:$nccl:$cublas:${LD_LIBRARY_PATH:-}"
dsa=build-serve/dsa
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
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "dp_rank_steps|generation_tokens_total |graph" > "$W/$name.metrics"
  kill -TERM $pid; wait $pid || rc=$?
  echo "$name: health $code, exit $rc, text $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["text"]))' "$W/$name.json" 2>/dev/null)"
  tail -2 "$W/$name.log"
}
serve_once plain
serve_once ranks1 --dp 1 --dp-processes
a=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$W/plain.json" 2>/dev/null)
b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$W/ranks1.json" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "serve over NCCL world 1: text equals the plain server's" || echo "serve over NCCL world 1: TEXT DIFFERS"
grep -E "starting|ready" "$W/ranks1.log" | head -3; cat "$W/ranks1.metrics"
timeout 60 $dsa serve --model models/tiny-dsa --device cuda --port 0 --dp 2 > "$W/dp2.log" 2>&1; echo "dp 2 on one GPU: rc=$? $(grep -m1 -E 'GPU|rank 1' "$W/dp2.log")"
bundle; echo "all done $(el) s"
