#!/usr/bin/env bash
# Stop 42, call 2: the three decode-grid rules (FP8 linear split-K within one wave, the grouped
# FP8 decode tile's two row tiles per CTA, sparse MLA's fewest tiles per split by rows).
# gpu_check (build all, ctest -L gpu, the e2e tests, the 5-layer V3.2 run; memcheck and racecheck
# on the grouped linear's and the linear's tests), then the ops' benches and the decode-equivalent
# V3.2 with the new rules against the old ones (same binary, env switches), then the README
# prompt d = 0 / d = 3. Everything but this script's output is bundled into $OUT/call2.tgz.
# Carry [".deps"].
set -u
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
W=/tmp/call2; mkdir -p $W
OUT=$W SKIP_BENCH=1 SAN_TESTS=grouped_linear_fp8_cuda_test \
  SAN_SECONDS_EACH=60 scripts/gpu_check.sh 2>&1 | grep -vE "Test command|TEST_EXECUTABLE|TEST_FILTER|Start |^[0-9]+: " | tail -14
grep -hE "tests passed|tests failed|\*\*\*Failed|Timeout" $W/ctest_gpu.log $W/ctest_e2e.log | head -10
echo "gpu_check done $(el) s"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
old_env() { export DSA_FP8_SPLITS=fill DSA_GROUPED_FP8_ROW_TILES=1 DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1; }
new_env() { unset DSA_FP8_SPLITS DSA_GROUPED_FP8_ROW_TILES DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT; }
{
for form in new old; do
  ${form}_env
  echo "== $form linear_bench fp8 1 4"; timeout 60 $(exe linear_bench) fp8 1 4 2>&1 | tail -14
  echo "== $form grouped_linear_fp8_bench"; timeout 60 $(exe grouped_linear_fp8_bench) 2>&1 | tail -10
done
} > $W/ops.log 2>&1
new_env
grep -E "==|7168|16384|1536|2048" $W/ops.log | head -60
echo "benches done $(el) s"
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
for form in new old mla1 new old; do
  [ $(el) -gt 470 ] && { echo "skip V3.2 $form (time)"; continue; }
  new_env; [ $form = old ] && old_env; [ $form = mla1 ] && export DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=1
  echo "== V3.2 $form ($(el) s)"
  BATCHES="1" CONTEXTS=4096 DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=120 \
    scripts/bench_v32.sh build-gpu /tmp/v32_$form 2>&1 | grep -vE "done in" | tail -3
  cat /tmp/v32_$form/bench_v32.jsonl >> $W/v32_$form.jsonl
done
new_env
if [ $(el) -lt 500 ]; then
  echo "== README prompt, new rules ($(el) s)"
  REPEAT=2 scripts/bench_readme.sh build-gpu 2>&1 | tail -8
fi
tar czf $OUT/call2.tgz -C /tmp call2
echo "all done $(el) s"
