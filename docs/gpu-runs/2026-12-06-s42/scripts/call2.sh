#!/usr/bin/env bash
# Stop 42, call 2: the FP8 linears' one-wave split rule and the grouped decode tile's two row tiles
# per CTA. Build; the GPU tests of the two ops and the prologue's test fix; the ops' benches and
# the decode-equivalent V3.2 with the new rules against the old ones (DSA_FP8_SPLITS=fill
# DSA_GROUPED_FP8_ROW_TILES=1), same binary, same call, alternated. Carry [".deps"].
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
t0=$(date +%s)
cmake --build build-gpu -j16 --target dsa linear_bench grouped_linear_fp8_bench linear_cuda_test \
  grouped_linear_fp8_cuda_test attention_prologue_cuda_test > $OUT/build.log 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 $OUT/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s, warnings: $(grep -c warning $OUT/build.log)"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
for t in attention_prologue_cuda_test linear_cuda_test grouped_linear_fp8_cuda_test; do
  echo "== $t: $(DSA_CHECKED=1 timeout 120 $(exe $t) --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure|Which is|rows? tiles" | head -10 | tr '\n' ' ')"
done
echo "tests $(( $(date +%s) - t0 )) s"
{
for form in new old; do
  if [ $form = old ]; then export DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1; else unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES; fi
  echo "== $form linear_bench fp8 1 4"; timeout 60 $(exe linear_bench) fp8 1 4 2>&1 | tail -14
  echo "== $form grouped_linear_fp8_bench"; timeout 60 $(exe grouped_linear_fp8_bench) 2>&1 | tail -10
done
} > $OUT/ops.log 2>&1
grep -E "==|7168|16384|1536|2048" $OUT/ops.log | head -60
echo "benches $(( $(date +%s) - t0 )) s"
unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
for round in 1 2; do
  for form in new old; do
    if [ $form = old ]; then export DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1; else unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES; fi
    echo "== round $round $form"
    BATCHES="1" CONTEXTS=4096 DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=120 \
      scripts/bench_v32.sh build-gpu /tmp/v32_${form}_$round 2>&1 | grep -vE "done in" | tail -4
    cp /tmp/v32_${form}_$round/bench_v32.jsonl $OUT/v32_${form}_$round.jsonl
  done
done
unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES
echo "all $(( $(date +%s) - t0 )) s"
