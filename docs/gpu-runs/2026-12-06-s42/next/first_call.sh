#!/usr/bin/env bash
# Stop 43's first device call: what stop 42 landed after its last GPU run (call 2, 3feeed8): the
# grouped FP8 decode tile's row-tile rule narrowed to grids one wave then holds (9c37721) and the
# review fixes and tests after it; then the sanitizers that did not run on the two-row-tile form,
# and the whole gpu_check without the kernel benches (~500 s; the profiles are second_call.sh).
# Run with carry [".deps"]: bash docs/gpu-runs/2026-12-06-s42/next/first_call.sh
set -u
bash docs/gpu-runs/2026-12-06-s42/scripts/call5.sh
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
for tool in memcheck racecheck; do
  timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool $tool --error-exitcode 99 $t --gtest_brief=1 \
    --gtest_filter='GroupedLinearFp8Cuda.DecodeRowTilesAgree:GroupedLinearFp8Cuda.PairedProjectionEqualsTwoLaunches' \
    > /tmp/$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/$tool.log | tail -1)"
done
mkdir -p /tmp/gc  # its 7 logs in one file: the device returns at most 8
OUT=/tmp/gc SKIP_BENCH=1 SKIP_SAN=1 scripts/gpu_check.sh 2>&1 | grep -vE "Test command|TEST_EXECUTABLE|TEST_FILTER|Start |^[0-9]+: |summary" | tail -8
grep -hE "tests passed|tests failed|\*\*\*Failed|Timeout" /tmp/gc/ctest_gpu.log /tmp/gc/ctest_e2e.log | head -10
tar czf $OUT/gpu_check.tgz -C /tmp gc
