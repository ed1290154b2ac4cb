#!/usr/bin/env bash
# Stop 42, call 4 (the budget's last ~350 s; call 3 was never started: no machine came): the final
# tree's GPU tests where it changed since call 2 (the grouped tile's row-tile rule and cursors,
# linear, sparse MLA), the whole-model tests (CPU vs CUDA, graph replay), memcheck on the grouped
# FP8 tests, then, while time is left, the decode-equivalent V3.2 at batch 1 with the rules on
# against off and the README prompt. Carry [".deps"].
set -u
. scripts/gpu_build_env.sh
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
W=$OUT
gpu_env $W/env.txt | head -1
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > /tmp/cfg.log 2>&1
ts="moe_dispatch_cuda_test linear_cuda_test sparse_mla_cuda_test tiny_model_cuda_test graph_replay_cuda_test"
cmake --build build-gpu -j16 --target dsa $ts > /tmp/build.log 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 /tmp/build.log | head -40; exit 1; }
echo "build $(el) s, warnings: $(grep -c warning /tmp/build.log)"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
for t in $ts; do
  echo "== $t: $(DSA_CHECKED=1 timeout 150 $(exe $t) --gtest_brief=1 2>&1 | tee $W/$t.log | grep -E "PASSED|FAILED|Failure" | head -8 | tr '\n' ' ') ($(el) s)"
done
san=/usr/local/cuda/bin/compute-sanitizer
[ $(el) -lt 260 ] && { timeout 40 $san --tool memcheck --error-exitcode 99 $(exe moe_dispatch_cuda_test) --gtest_brief=1 \
  --gtest_filter='GroupedLinearFp8Cuda.DecodeRowTilesAgree:GroupedLinearFp8Cuda.PairedProjectionEqualsTwoLaunches:GroupedLinearFp8Cuda.EveryTileWidthAndShortBlocks' \
  > /tmp/memcheck.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/memcheck.log | tail -1) ($(el) s)"; }
old_env() { export DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1 DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1; }
new_env() { unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT; }
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
for form in new old; do
  [ $(el) -gt 290 ] && { echo "skip V3.2 $form (time)"; continue; }
  new_env; [ $form = old ] && old_env
  echo "== V3.2 $form ($(el) s)"
  BATCHES="1" CONTEXTS=4096 DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=40 \
    scripts/bench_v32.sh build-gpu /tmp/v32_$form 2>&1 | grep -vE "done in" | tail -4
  cp /tmp/v32_$form/bench_v32.jsonl $W/v32_$form.jsonl
done
new_env
[ $(el) -lt 320 ] && { echo "== README prompt ($(el) s)"; REPEAT=1 scripts/bench_readme.sh build-gpu 2>&1 | tail -3; }
echo "all done $(el) s"
