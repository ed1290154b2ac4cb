#!/usr/bin/env bash
# Call D of stop 40: the grouped FP8 decode tile with a 4-stage ring (five CTAs per SM, so the
# shared expert's ninth group of 64 CTAs no longer spills into a second wave) against the 6-stage
# default, with both fusions and with qkv_a alone; the grouped linear's GPU tests and memcheck.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa moe_dispatch_cuda_test > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep error -A3 $OUT/build.log | head; exit 1; }
echo "build warnings: $(grep -c warning $OUT/build.log)"
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
$t --gtest_brief=1 --gtest_filter="GroupedLinearFp8*" 2>&1 | grep -E "PASSED|FAILED|Failure" | head -5
/usr/local/cuda/bin/compute-sanitizer --tool memcheck $t --gtest_filter='*RingDepths*:GroupedLinearFp8Cuda.Paired*' --gtest_brief=1 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -3
/usr/local/cuda/bin/compute-sanitizer --tool racecheck $t --gtest_filter='*RingDepths*' --gtest_brief=1 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | head -3
for form in both4 both6 qkv4 qkv6; do
  flags=""; case $form in qkv*) flags="--disable-shared-experts-fusion" ;; esac
  stages=${form: -1}
  echo "== V3.2 $form"
  DSA_GROUPED_FP8_DECODE_STAGES=$stages EXTRA_FLAGS="$flags" PROFILE=1 HBM_TBS=3.35 BATCHES="1 8" \
    CONTEXTS=4096 NEW_TOKENS=64 RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 \
    | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_$form
done
