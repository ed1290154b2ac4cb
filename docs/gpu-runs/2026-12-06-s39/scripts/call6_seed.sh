#!/usr/bin/env bash
# s39 call 6: GraphReplay.DecodeEqualsEagerAndCpu with call 5's seed on the tree before this stop's
# issue-15 changes (59462fa): is the mean |d| over 0.02 theirs or the seed's?
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch/base && ln -sfn ../../models models && ln -sfn ../../.deps .deps && ln -sfn ../../testdata testdata
gpu_configure build-base > $OUT/cfg.log 2>&1
cmake --build build-base -j16 --target graph_replay_cuda_test > $OUT/build.log 2>&1 || { echo BUILD FAIL; exit 1; }
t=$(find build-base -name graph_replay_cuda_test -type f -executable | head -1)
(cd $(dirname $t) && DSA_CHECKED=1 DSA_TEST_SEED=3416855923667463010 ./graph_replay_cuda_test --gtest_filter='GraphReplay.DecodeEqualsEagerAndCpu' 2>&1 | grep -E "seed|d = 0|Failure|Expected|OK|FAILED" | head)
