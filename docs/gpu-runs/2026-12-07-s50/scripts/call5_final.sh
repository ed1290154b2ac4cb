#!/usr/bin/env bash
# Stop 50, call 5 (carry [".deps"]; call 4 found no machine): the last device time of the stop.
# 1. The FP8 grouped linear's prefill form as landed (GEMMs over 8 side streams, chunks double
#    buffered): the op's GroupedLinearFp8Cuda tests, then grouped_linear_fp8_bench at T = 4096 with
#    the form (auto) and with DSA_GROUPED_FP8_PREFILL=kernel, side by side.
# 2. The acceptance op's greedy verify (4324284: the argmax kernel at d >= 1): acceptance_cuda_test
#    and acceptance_bench ("greedy op" against "greedy", the sampling kernel at temperature 0).
# 3. memcheck of the new tests of both.
set -u
. scripts/device_call.sh
call_begin call5_final
call_build moe_dispatch_cuda_test grouped_linear_fp8_bench acceptance_cuda_test acceptance_bench
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
timeout 90 "$t" --gtest_filter='GroupedLinearFp8Cuda.*' >"$W/grouped_fp8_tests.log" 2>&1
echo "GroupedLinearFp8Cuda.* rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/grouped_fp8_tests.log" | tr '\n' ' ')"
grep -E "FAILED|Failure" "$W/grouped_fp8_tests.log" | head -10
a=$(find build-gpu -name acceptance_cuda_test -type f -executable | head -1)
timeout 60 "$a" >"$W/acceptance_cuda_test.log" 2>&1
echo "acceptance_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/acceptance_cuda_test.log" | tr '\n' ' ')"
grep -E "FAILED|Failure" "$W/acceptance_cuda_test.log" | head -10
bundle
b=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
timeout 60 "$b" 4096 >"$W/bench_auto.log" 2>&1; echo "bench auto rc=$?"
DSA_GROUPED_FP8_PREFILL=kernel timeout 60 "$b" 4096 >"$W/bench_kernel.log" 2>&1
echo "bench kernel rc=$?"; grep -hE "T=4096" "$W/bench_auto.log" "$W/bench_kernel.log"
bundle
ab=$(find build-gpu -name acceptance_bench -type f -executable | head -1)
timeout 40 "$ab" >"$W/acceptance_bench.log" 2>&1; echo "acceptance_bench rc=$?"
grep -E "greedy" "$W/acceptance_bench.log" | head -24
bundle
if [ "$(el)" -lt 130 ]; then
  timeout $((180 - $(el))) compute-sanitizer --tool memcheck "$t" --gtest_filter='*PrefillForm*' \
    >"$W/memcheck_prefill.log" 2>&1
  echo "memcheck prefill rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck_prefill.log")"
fi
if [ "$(el)" -lt 165 ]; then
  timeout $((190 - $(el))) compute-sanitizer --tool memcheck "$a" --gtest_filter='*GreedyVerify*' \
    >"$W/memcheck_acceptance.log" 2>&1
  echo "memcheck acceptance rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck_acceptance.log")"
fi
bundle; echo "all done $(el) s"
