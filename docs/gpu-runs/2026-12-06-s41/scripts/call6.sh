#!/usr/bin/env bash
# Stop 41, call 6 (the budget's last ~250 s): the review fixes' GPU tests only: the prologue's
# dispatch predicate and edge rows, the indexer query's bounded CPU agreement, the narrow-GEMV
# switch's tests (linear, batched_linear). Op targets only (no engine build). Carry [".deps"].
set -u
. scripts/gpu_build_env.sh
t0=$(date +%s)
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
ts="attention_prologue_cuda_test indexer_query_cuda_test linear_cuda_test batched_linear_cuda_test"
cmake --build build-gpu -j16 --target $ts > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep -E "error" -A3 $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t0 )) s, warnings: $(grep -c warning $OUT/build.log)"
for t in $ts; do
  b=$(find build-gpu -name $t -type f -executable | head -1)
  echo "== $t: $(DSA_CHECKED=1 timeout 60 $b --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure|note:" | head -8 | tr '\n' ' ')"
done
echo "done $(( $(date +%s) - t0 )) s"
