#!/usr/bin/env bash
# Stop 50, call 4 (carry [".deps"]): the prefill form with its GEMMs spread over 8 side streams
# (call 3: one stream, 12.5% / 16.9% of the fp8 peak at T = 4096): the op's tests that take the
# form or the paired path, memcheck of the form's tests, then grouped_linear_fp8_bench.
set -u
. scripts/device_call.sh
call_begin call4_prefill_streams
call_build moe_dispatch_cuda_test grouped_linear_fp8_bench
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
timeout 120 "$t" --gtest_filter='GroupedLinearFp8Cuda.*' >"$W/grouped_fp8_tests.log" 2>&1
echo "GroupedLinearFp8Cuda.* rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/grouped_fp8_tests.log" | tr '\n' ' ')"
grep -E "FAILED|Failure" "$W/grouped_fp8_tests.log" | head -10
bundle
b=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
timeout 150 "$b" >"$W/bench_auto.log" 2>&1; echo "bench auto rc=$?"
grep -E "T=4096" "$W/bench_auto.log"
bundle
timeout 100 compute-sanitizer --tool memcheck "$t" --gtest_filter='*PrefillForm*' \
  >"$W/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck.log")"
bundle; echo "all done $(el) s"
