#!/usr/bin/env bash
# Session 38 call D, on the landed tree, most important first: compute-sanitizer (memcheck,
# racecheck) on sparse_mla_cuda_test, then the whole build, ctest -L gpu and the whole-model tests.
set -u
T0=$(date +%s); ph() { echo "[D $(( $(date +%s) - T0 ))s] $*"; }
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target sparse_mla_cuda_test > $OUT/build_test.log 2>&1 || echo "BUILD FAIL"
ph "sparse_mla_cuda_test built"
t=$(find build-gpu -name sparse_mla_cuda_test -type f -executable | head -1)
san=/usr/local/cuda/bin/compute-sanitizer
DSA_CHECKED=1 timeout 60 $san --tool memcheck --error-exitcode 99 $t --gtest_brief=1 > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/memcheck.log | tr '\n' ' ')"
DSA_CHECKED=1 timeout 60 $san --tool racecheck --error-exitcode 99 $t --gtest_brief=1 --gtest_filter='-*V32*:*V3_2*' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $OUT/racecheck.log | tr '\n' ' ')"
ph "sanitizer"
cmake --build build-gpu -j16 > $OUT/build.log 2>&1 || { echo "BUILD FAIL"; grep -E "error" $OUT/build.log | head; }
echo "build warnings: $(grep -c warning $OUT/build.log)"
a=$(find build-gpu -name "libdsa_op_sparse_mla_cuda.a" | head -1)
echo "sparse_mla SASS MMA: $(cuobjdump -sass "$a" 2>/dev/null | grep -oE '[A-Z]*MMA[.A-Z0-9]*' | sort | uniq -c | tr '\n' ' ')"
ph "built"
e2e='GraphReplay|EngineGraphs|TinyModelCuda'
(cd build-gpu && DSA_CHECKED=1 timeout 170 ctest -L gpu -E "$e2e" --output-on-failure -j 4) > $OUT/ctest_gpu.log 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*" $OUT/ctest_gpu.log | head -12
ph "ctest gpu"
(cd build-gpu && DSA_CHECKED=1 timeout 150 ctest -L gpu -R "$e2e" -V -j 4) > $OUT/ctest_e2e.log 2>&1
grep -E "tests passed|tests failed|Failed|divergences|bit for bit" $OUT/ctest_e2e.log | grep -v "Test command" | head -24 | cut -c1-200
ph "done"
