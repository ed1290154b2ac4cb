#!/usr/bin/env bash
# Stop 50, call 3 (carry [".deps"]): the FP8 grouped linear's prefill form (one cuBLASLt
# block-scaled GEMM a group, grouped_linear_fp8_lt.cu): the op's gpu tests (the new
# PrefillForm* among them) and the dense linear's (its cuBLASLt path now also serves the op),
# memcheck on the new tests, then grouped_linear_fp8_bench with the form (auto: T = 4096 takes
# it) against DSA_GROUPED_FP8_PREFILL=kernel, in one call; then the narrow V3.2 checkpoint's
# whole-model tests (their prefill may take the form).
set -u
. scripts/device_call.sh
call_begin call3_prefill
call_build moe_dispatch_cuda_test linear_cuda_test grouped_linear_fp8_bench
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
timeout 200 "$t" >"$W/moe_dispatch_cuda_test.log" 2>&1
echo "moe_dispatch_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/moe_dispatch_cuda_test.log" | tr '\n' ' ')"
grep -E "FAILED|Failure|error" "$W/moe_dispatch_cuda_test.log" | head -20
l=$(find build-gpu -name linear_cuda_test -type f -executable | head -1)
timeout 120 "$l" >"$W/linear_cuda_test.log" 2>&1
echo "linear_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/linear_cuda_test.log" | tr '\n' ' ')"
bundle
b=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
timeout 150 "$b" >"$W/bench_auto.log" 2>&1; echo "bench auto rc=$?"
DSA_GROUPED_FP8_PREFILL=kernel timeout 150 "$b" >"$W/bench_kernel.log" 2>&1; echo "bench kernel rc=$?"
grep -E "T=4096|T=128 " "$W/bench_auto.log" "$W/bench_kernel.log"
bundle
timeout 150 compute-sanitizer --tool memcheck "$t" --gtest_filter='*PrefillForm*' \
  >"$W/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck.log")"
bundle
if [ "$(el)" -lt 420 ]; then
  call_build dsa narrow_checkpoint_cuda_test tiny_model_cuda_test
  (cd build-gpu && timeout $((585 - $(el))) ctest -L gpu -R 'NarrowCheckpointCuda|TinyModelCuda' -j 4) \
    >"$W/ctest_e2e.log" 2>&1
  echo "whole-model tests: $(grep -E 'tests passed|tests failed' "$W/ctest_e2e.log")"
  grep -hE "teacher-forced:|divergences over" "$W/ctest_e2e.log" | head -8
fi
bundle; echo "all done $(el) s"
