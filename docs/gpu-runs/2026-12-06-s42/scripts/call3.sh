#!/usr/bin/env bash
# Stop 42, call 3: the tree with all three decode-grid rules final (the grouped row-tile rule
# narrowed to grids one wave then holds; its cursors by adds). gpu_check (build all, ctest -L gpu,
# the e2e tests, the 5-layer V3.2 run), memcheck and racecheck on the grouped FP8 tests, the
# grouped bench new against old, the decode-equivalent V3.2 at batch 1 and 8 and the README prompt
# with the rules on against off (DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1
# DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1), same binary; each optional stage only while time is left
# (the device budget). Extra outputs bundled in $OUT/call3.tgz. Carry [".deps"].
set -u
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
W=/tmp/call3; mkdir -p $W
OUT=$W SKIP_BENCH=1 SKIP_SAN=1 scripts/gpu_check.sh 2>&1 | grep -vE "Test command|TEST_EXECUTABLE|TEST_FILTER|Start |^[0-9]+: |summary" | tail -8
grep -hE "tests passed|tests failed|\*\*\*Failed|Timeout" $W/ctest_gpu.log $W/ctest_e2e.log | head -10
echo "gpu_check $(el) s"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
t=$(exe moe_dispatch_cuda_test)
san=/usr/local/cuda/bin/compute-sanitizer
timeout 60 $san --tool memcheck --error-exitcode 99 $t --gtest_brief=1 \
  --gtest_filter='GroupedLinearFp8Cuda.DecodeRowTilesAgree:GroupedLinearFp8Cuda.PairedProjectionEqualsTwoLaunches:GroupedLinearFp8Cuda.EveryTileWidthAndShortBlocks:GroupedLinearFp8Cuda.DecodeRingDepthsAgree' \
  > $W/memcheck.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $W/memcheck.log | tail -1)"
timeout 60 $san --tool racecheck --error-exitcode 99 $t --gtest_brief=1 \
  --gtest_filter='GroupedLinearFp8Cuda.DecodeRowTilesAgree:GroupedLinearFp8Cuda.EveryTileWidthAndShortBlocks' \
  > $W/racecheck.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' $W/racecheck.log | tail -1)"
echo "sanitizers $(el) s"
old_env() { export DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1 DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1; }
new_env() { unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT; }
for form in new old; do
  ${form}_env; echo "== $form grouped_linear_fp8_bench"; timeout 40 $(exe grouped_linear_fp8_bench) 2>&1 | tail -10
done > $W/ops.log 2>&1
new_env; grep -E "==|T=1 |T=8 " $W/ops.log
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
for form in new old; do
  [ $(el) -gt 330 ] && { echo "skip V3.2 $form (time)"; continue; }
  new_env; [ $form = old ] && old_env
  echo "== V3.2 $form ($(el) s)"
  BATCHES="1" CONTEXTS=4096 DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=60 \
    scripts/bench_v32.sh build-gpu /tmp/v32_$form 2>&1 | grep -vE "done in" | tail -5
  cat /tmp/v32_$form/bench_v32.jsonl >> $W/v32_$form.jsonl
done
for form in new; do
  [ $(el) -gt 390 ] && { echo "skip README $form (time)"; continue; }
  new_env; [ $form = old ] && old_env
  echo "== README prompt $form ($(el) s)"; REPEAT=2 scripts/bench_readme.sh build-gpu 2>&1 | tail -3
done
new_env
tar czf $OUT/call3.tgz -C /tmp call3
echo "all done $(el) s"
