#!/usr/bin/env bash
# s39 call 5: the tree after kPositions went (679ce17): the step-commit and whole-model GPU tests.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target step_commit_cuda_test acceptance_cuda_test tiny_model_cuda_test engine_graphs_cuda_test graph_replay_cuda_test > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep -E "error" -A3 $OUT/build.log | head -20; exit 1; }
echo "build warnings: $(grep -c warning $OUT/build.log)"
(cd build-gpu && DSA_CHECKED=1 ctest -L gpu -R "StepCommitCuda|AcceptanceCuda|TinyModelCuda|EngineGraphs|GraphReplay" -V > $OUT/ctest.log 2>&1; echo "ctest rc=$? $(grep -E 'tests passed|tests failed' $OUT/ctest.log)")
grep -E "divergences over|bit for bit" $OUT/ctest.log | head -12
t=$(find build-gpu -name step_commit_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 99 $t --gtest_brief=1 > $OUT/memcheck.log 2>&1; echo "memcheck step_commit rc=$? $(grep 'ERROR SUMMARY' $OUT/memcheck.log)"
