#!/usr/bin/env bash
# Stop 42, call 3: the grouped decode tile's row-tile rule narrowed to grids that one wave then
# holds (call 2: two tiles per CTA slowed a 2048-CTA grid). Build; the moe_dispatch GPU tests
# (checked), memcheck and racecheck on the grouped FP8 tests; the grouped bench new against old;
# the decode-equivalent V3.2 at batch 1 and 8 and the README prompt, the three rules on against
# off (DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1 DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1),
# same binary. Extra outputs bundled in $OUT/call3.tgz. Carry [".deps"].
set -u
. scripts/gpu_build_env.sh
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
W=/tmp/call3; mkdir -p $W
gpu_env $W/env.txt | head -2
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $W/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa moe_dispatch_cuda_test grouped_linear_fp8_bench > $W/build.log 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 $W/build.log | head -40; exit 1; }
echo "build $(el) s, warnings: $(grep -c warning $W/build.log)"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
t=$(exe moe_dispatch_cuda_test)
echo "== moe_dispatch_cuda_test: $(DSA_CHECKED=1 timeout 120 $t --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure" | head -8 | tr '\n' ' ')"
san=/usr/local/cuda/bin/compute-sanitizer
timeout 120 $san --tool memcheck --error-exitcode 99 $t --gtest_brief=1 \
  --gtest_filter='GroupedLinearFp8Cuda.*' > $W/memcheck.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $W/memcheck.log | tail -1)"
timeout 120 $san --tool racecheck --error-exitcode 99 $t --gtest_brief=1 \
  --gtest_filter='GroupedLinearFp8Cuda.DecodeRowTilesAgree:GroupedLinearFp8Cuda.PairedProjectionEqualsTwoLaunches:GroupedLinearFp8Cuda.EveryTileWidthAndShortBlocks' \
  > $W/racecheck.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' $W/racecheck.log | tail -1)"
echo "tests $(el) s"
old_env() { export DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1 DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1; }
new_env() { unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT; }
for form in new old; do
  ${form}_env; echo "== $form grouped_linear_fp8_bench"; timeout 60 $(exe grouped_linear_fp8_bench) 2>&1 | tail -10
done > $W/ops.log 2>&1
new_env; grep -E "==|T=1 |T=8 " $W/ops.log
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
for form in new old new old; do
  [ $(el) -gt 420 ] && { echo "skip V3.2 $form (time)"; continue; }
  new_env; [ $form = old ] && old_env
  echo "== V3.2 $form ($(el) s)"
  BATCHES="1 8" CONTEXTS=4096 DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=100 \
    scripts/bench_v32.sh build-gpu /tmp/v32_$form 2>&1 | grep -vE "done in" | tail -5
  cat /tmp/v32_$form/bench_v32.jsonl >> $W/v32_$form.jsonl
done
for form in new old; do
  [ $(el) -gt 500 ] && { echo "skip README $form (time)"; continue; }
  new_env; [ $form = old ] && old_env
  echo "== README prompt $form ($(el) s)"; REPEAT=2 scripts/bench_readme.sh build-gpu 2>&1 | tail -3
done
new_env
if [ $(el) -lt 470 ]; then  # where the tiny model's d = 3 step goes (ncu per kernel, eager)
  echo "== tiny-model profile ($(el) s)"
  RUN_SECONDS=45 scripts/profile_tiny_verify.sh build-gpu $W/prof 2>&1 | head -14
fi
tar czf $OUT/call3.tgz -C /tmp call3
echo "all done $(el) s"
