#!/usr/bin/env bash
# Stop 42, call 5 (the budget's last minutes; calls 3 and 4 never started): the final tree's one
# change since call 2, the grouped row-tile rule narrowed to grids one wave then holds: the
# moe_dispatch GPU tests (checked) and the grouped bench with the final rule. Carry [".deps"].
set -u
. scripts/gpu_build_env.sh
t0=$(date +%s)
gpu_env $OUT/env.txt | head -1
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target moe_dispatch_cuda_test grouped_linear_fp8_bench > /tmp/build.log 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 /tmp/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s, warnings: $(grep -c warning /tmp/build.log)"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
echo "== moe_dispatch_cuda_test: $(DSA_CHECKED=1 timeout 100 $(exe moe_dispatch_cuda_test) --gtest_brief=1 2>&1 | tee $OUT/moe_dispatch_cuda_test.log | grep -E "PASSED|FAILED|Failure" | head -8 | tr '\n' ' ')"
timeout 60 $(exe grouped_linear_fp8_bench) 2>&1 | tail -10 | tee $OUT/grouped_bench.log
echo "all done $(( $(date +%s) - t0 )) s"
