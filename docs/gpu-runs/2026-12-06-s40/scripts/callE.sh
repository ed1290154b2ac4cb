#!/usr/bin/env bash
# Call E of stop 40: the final defaults (both fusions; the shared expert grouped up to 16 rows; the
# decode tile's ring depth chosen by the grid) against both fusions off, same binary, same call;
# the grouped linear's tests.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa moe_dispatch_cuda_test > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep error -A3 $OUT/build.log | head; exit 1; }
echo "build warnings: $(grep -c warning $OUT/build.log)"
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
$t --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure" | head -5
for form in final none; do
  flags=""; [ $form = none ] && flags="--disable-fused-qkv-a --disable-shared-experts-fusion"
  echo "== V3.2 $form"
  EXTRA_FLAGS="$flags" PROFILE=1 HBM_TBS=3.35 BATCHES="1 8" CONTEXTS=4096 NEW_TOKENS=64 \
    RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_$form
done
