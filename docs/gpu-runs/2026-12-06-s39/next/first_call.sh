#!/usr/bin/env bash
# Stop 40's first device call: what stop 39 changed after its last GPU run (the device budget was
# spent): GraphReplay with the mean bounded over the close rows (86bc03a, 6324aac),
# at call 5's failing seed and a fresh one; the acceptance tests with cluster sizes 3 and 6 and
# the index below -1; the step-commit tests without kPositions; then scripts/profile_tiny_verify.sh.
# Run with carry [".deps"]: bash docs/gpu-runs/2026-12-06-s39/next/first_call.sh
set -u
root=$PWD
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target graph_replay_cuda_test acceptance_cuda_test step_commit_cuda_test > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep -E "error" -A3 $OUT/build.log | head -20; exit 1; }
echo "build warnings: $(grep -c warning $OUT/build.log)"
for t in acceptance_cuda_test step_commit_cuda_test; do
  b=$(find build-gpu -name $t -type f -executable | head -1)
  DSA_CHECKED=1 $b --gtest_brief=1 > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
t=$(find build-gpu -name graph_replay_cuda_test -type f -executable | head -1)
cd $(dirname $t)
for s in 3416855923667463010 ""; do
  if [ -n "$s" ]; then export DSA_TEST_SEED=$s; else unset DSA_TEST_SEED; fi
  DSA_CHECKED=1 ./graph_replay_cuda_test --gtest_brief=1 2>&1 | grep -E "seed|forwards replayed|Failure|Expected|PASSED|FAILED" | head
done
# Then where the verify's time goes beyond a decode's (issue 15's remaining bound).
cd "$root"
cmake --build build-gpu -j16 --target dsa > $OUT/build_dsa.log 2>&1 && scripts/profile_tiny_verify.sh build-gpu $OUT/verify
