#!/usr/bin/env bash
# A next-stop call (s50 scripts/call1_tests.sh) (carry [".deps"]), on the tree with call_distill.sh's
# MTP layer and goldens landed: every gpu test (the whole-model ones verbose), which includes what landed
# after s50's call 3 without a GPU (the prefill form's side streams and double-buffered chunks with
# the review's tests, 658895a; the greedy verify's argmax kernel, 4324284); then, time allowing,
# the prefill form at T = 4096 with the form and with the tile kernel, side by side.
set -u
. scripts/device_call.sh
call_begin call_tests
( while sleep 60; do bundle; done ) & keeper=$!
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 SKIP_SAN=1 GPU_TEST_SECONDS=230 \
  timeout 440 scripts/gpu_check.sh 2>&1 | tail -20
grep -hE "teacher-forced:|divergences over" "$W/check/ctest_e2e.log" | head -12
grep -hE "^\[  FAILED|Failure" "$W/check/ctest_gpu.log" | head -20
b=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
if [ -n "$b" ] && [ "$(el)" -lt 520 ]; then
  timeout 30 "$b" 4096 >"$W/bench_auto.log" 2>&1; echo "bench auto rc=$?"
  DSA_GROUPED_FP8_PREFILL=kernel timeout 30 "$b" 4096 >"$W/bench_kernel.log" 2>&1
  echo "bench kernel rc=$?"; grep -hE "T=4096" "$W/bench_auto.log" "$W/bench_kernel.log"
fi
kill $keeper; bundle; echo "all done $(el) s"
