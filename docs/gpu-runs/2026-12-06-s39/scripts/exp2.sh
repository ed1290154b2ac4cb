#!/usr/bin/env bash
# s39 call 3: the acceptance op in one launch + the MTP norm pair, GPU tests, then the README
# ratio side by side with the tree before them (59462fa, built beside it in .scratch/base).
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s); ph() { echo "[exp2 $(( $(date +%s) - T0 ))s] $*"; }
gpu_configure build-gpu > $OUT/cfg.log 2>&1
TG="dsa acceptance_cuda_test rmsnorm_cuda_test engine_test tiny_model_cuda_test graph_replay_cuda_test engine_graphs_cuda_test"
cmake --build build-gpu -j16 --target $TG > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep -E "error|warning" $OUT/build.log | head -20; exit 1; }
grep -c "warning" $OUT/build.log | sed 's/^/build warnings: /'
( cd .scratch/base && ln -sfn ../../models models && ln -sfn ../../.deps .deps && ln -sfn ../../.deps .deps && gpu_configure build-base > $OUT/cfg_base.log 2>&1 && cmake --build build-base -j16 --target dsa > $OUT/build_base.log 2>&1 ) || echo "BASE BUILD FAIL"
ph "built"
for t in acceptance_cuda_test rmsnorm_cuda_test; do
  b=$(find build-gpu -name $t -type f -executable | head -1)
  DSA_CHECKED=1 $b --gtest_brief=1 > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
DSA_CHECKED=1 timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 99 $(find build-gpu -name acceptance_cuda_test -type f -executable | head -1) --gtest_brief=1 --gtest_filter='*Kept*:*BadKept*:*Fuzzed*' > $OUT/memcheck.log 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log)"
DSA_CHECKED=1 timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 99 $(find build-gpu -name acceptance_cuda_test -type f -executable | head -1) --gtest_brief=1 --gtest_filter='*Kept*:*BadKept*' > $OUT/racecheck.log 2>&1; echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/racecheck.log)"
ph "op tests"
( cd build-gpu && DSA_CHECKED=1 ctest -L gpu -R "TinyModelCuda|GraphReplay|EngineGraphs|DeviceCommit|BackendAcceptance|tiny_model_cuda|graph_replay|engine_graphs|engine_test" --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$? $(grep -E 'tests passed|tests failed' $OUT/ctest.log)" )
DSA_CHECKED=1 build-gpu/dsa/engine/engine_test --gtest_brief=1 > $OUT/engine_test.log 2>&1; echo "engine_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/engine_test.log | tr '\n' ' ')"
ph "engine tests"
for round in 1 2; do
  for tree in base new; do
    if [ $tree = base ]; then dir=.scratch/base; else dir=.; fi
    echo "=== round $round $tree"
    ( cd $dir && REPEAT=3 scripts/bench_readme.sh $( [ $tree = base ] && echo build-base || echo build-gpu ) 2>&1 | grep -E "median|d3 / d0" )
  done
done
ph "readme"
for tree in base new; do
  if [ $tree = base ]; then dir=.scratch/base; b=build-base; else dir=.; b=build-gpu; fi
  echo "=== engine $tree"
  ( cd $dir && PROFILE=1 RUNS=on:device BATCHES="1 8" scripts/bench_engine.sh $b > $OUT/engine_$tree.log 2>&1; tail -14 $OUT/engine_$tree.log )
done
ph "done"
