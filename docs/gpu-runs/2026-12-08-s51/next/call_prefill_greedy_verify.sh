#!/usr/bin/env bash
# A next-stop call (s50 next/call_prefill_greedy_verify.sh; stop 51 got no machine) (carry [".deps"]):
# 1. The FP8 grouped linear's prefill form as landed (GEMMs over 8 side streams, chunks double
#    buffered): the op's GroupedLinearFp8Cuda tests, then grouped_linear_fp8_bench at T = 4096 with
#    the form (auto) and with DSA_GROUPED_FP8_PREFILL=kernel, side by side.
# 2. The acceptance op's greedy verify (4324284: the argmax kernel at d >= 1): acceptance_cuda_test
#    and acceptance_bench ("greedy op" against "greedy", the sampling kernel at temperature 0).
# 3. memcheck of the new tests of both.
# 4. The README prompt d = 0 / 3 (an all-greedy verify now takes the argmax kernel) and the step's
#    kernel timeline.
set -u
. scripts/device_call.sh
call_begin call_prefill_greedy_verify
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
timeout 200 compute-sanitizer --tool memcheck "$t" --gtest_filter='*PrefillForm*' \
  >"$W/memcheck_prefill.log" 2>&1
echo "memcheck prefill rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck_prefill.log")"
timeout 120 compute-sanitizer --tool memcheck "$a" --gtest_filter='*GreedyVerify*' \
  >"$W/memcheck_acceptance.log" 2>&1
echo "memcheck acceptance rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck_acceptance.log")"
bundle
call_build dsa
REPEAT=3 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme.log" 2>&1
echo "README: $(grep -E '^d [03] median' "$W/readme.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme.log")"
bundle
if [ "$(el)" -lt 500 ]; then
  timeout $((580 - $(el))) scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
  echo "trace rc=$?"; cat "$W/trace.log"
  grep -E "acceptance|step_commit" "$W/trace/timeline_d3.txt" | head -8
  rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv
fi
bundle; echo "all done $(el) s"
