#!/usr/bin/env bash
# s39 call 7: GraphReplay with the mean bounded over the close rows, call 5's seed and a fresh one.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target graph_replay_cuda_test > $OUT/build.log 2>&1 || { echo BUILD FAIL; exit 1; }
t=$(find build-gpu -name graph_replay_cuda_test -type f -executable | head -1)
cd $(dirname $t)
for s in 3416855923667463010 ""; do
  if [ -n "$s" ]; then export DSA_TEST_SEED=$s; else unset DSA_TEST_SEED; fi
  DSA_CHECKED=1 ./graph_replay_cuda_test --gtest_brief=1 --gtest_filter='GraphReplay.Decode*:GraphReplay.Speculative*' 2>&1 | grep -E "seed|forwards replayed|Failure|Expected|PASSED|FAILED" | head
done
