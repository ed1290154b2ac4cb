#!/usr/bin/env bash
# A next-stop call (carry [".deps"]), on stop 52's final tree:
# 1. The grouped prefill GEMM with its scales loaded two blocks ahead (8794f42, never run): the
#    prefill tests under both GEMMs, memcheck of the wgmma ones, grouped_linear_fp8_bench at
#    T = 4096 with the wgmma GEMM and with the per-group cuBLASLt GEMMs side by side (call 4 of
#    stop 52 measured 99a9db0's form at 3653 / 5966 / 3386-3458 us for gate / gate + up / down).
# 2. Every gpu test (gpu_check.sh without the sanitizer and the benchmarks).
# 3. Time allowing, call 3's paged_logits_bench stall (past 100 s after B=128 L=64K n=1 on the
#    H100): that shape and its neighbours alone, each capped.
set -u
. scripts/device_call.sh
call_begin call_next
call_build moe_dispatch_cuda_test grouped_linear_fp8_bench
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
timeout 90 "$t" --gtest_filter='*Prefill*' >"$W/prefill_tests.log" 2>&1
echo "*Prefill* rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$W/prefill_tests.log" | tr '\n' ' ')"
grep -E "FAILED|Failure" "$W/prefill_tests.log" | head -10
b=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
for g in wgmma lt wgmma lt; do
  DSA_GROUPED_FP8_PREFILL_GEMM=$g timeout 30 "$b" 4096 2>&1 | grep T=4096 | sed "s/^/$g /"
done | tee "$W/bench.log"
timeout 60 compute-sanitizer --tool memcheck "$t" \
  --gtest_filter='*PrefillGemm*wgmma*:*ReusesItsChunkBuffers*' >"$W/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$W/memcheck.log")"
bundle
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 SKIP_SAN=1 GPU_TEST_SECONDS=200 \
  timeout $((560 - $(el))) scripts/gpu_check.sh 2>&1 | tail -12
bundle
if [ "$(el)" -lt 500 ]; then
  call_build paged_logits_bench
  pb=$(find build-gpu -name paged_logits_bench -type f -executable | head -1)
  for sh in B=128,L=64K,n=2 B=32,L=8K,n=1; do
    timeout 20 "$pb" --shape "$sh" --iters 50 >"$W/paged_$sh.log" 2>&1
    echo "paged_logits $sh rc=$?: $(grep -oE 'us=[0-9.]+ ' "$W/paged_$sh.log" | head -1)"
  done
fi
bundle; echo "all done $(el) s"
