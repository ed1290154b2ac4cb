#!/usr/bin/env bash
# Stop 52, call 4 (carry [".deps"]; cut to fit the ~500 s of device time left): the FP8 grouped
# linear's prefill form on the new grouped wgmma GEMM (grouped_prefill_gemm.cu, one launch per
# chunk for every group): its SASS and registers, the prefill tests under both GEMMs,
# grouped_linear_fp8_bench at T = 4096 with the wgmma GEMM and the per-group cuBLASLt GEMMs side by
# side, memcheck and racecheck of the new kernel's tests.
set -u
. scripts/device_call.sh
call_begin call4
call_build moe_dispatch_cuda_test grouped_linear_fp8_bench
a=$(find build-gpu -name "libdsa_op_moe_dispatch_cuda.a" | head -1)
echo "moe_dispatch SASS MMA: $(cuobjdump -sass "$a" 2>/dev/null | grep -oE '[A-Z]*MMA[.A-Z0-9]*' | sort | uniq -c | tr '\n' ' ')"
cuobjdump -res-usage "$a" 2>/dev/null | grep -A1 prefill_gemm | tail -1
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
timeout 80 "$t" --gtest_filter='*Prefill*' >"$W/tests.log" 2>&1
echo "*Prefill* rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/tests.log" | tr '\n' ' ')"
grep -E "FAILED|Failure|mismatch|expected" "$W/tests.log" | head -20
bundle
b=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
for g in wgmma lt; do
  DSA_GROUPED_FP8_PREFILL_GEMM=$g timeout 25 "$b" 4096 >"$W/bench_$g.log" 2>&1
  echo "bench $g rc=$?"
done
grep -hE "T=4096" "$W"/bench_wgmma.log "$W"/bench_lt.log
bundle
timeout 45 compute-sanitizer --tool memcheck "$t" \
  --gtest_filter='*PrefillGemm*wgmma*:*ReusesItsChunkBuffers*' >"$W/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck.log")"
bundle
if [ "$(el)" -lt 230 ]; then
  timeout 40 compute-sanitizer --tool racecheck "$t" --gtest_filter='*PrefillGemm.Neutralises/wgmma*' \
    >"$W/racecheck.log" 2>&1
  echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$W/racecheck.log" | tr '\n' ' ')"
fi
bundle; echo "all done $(el) s"
