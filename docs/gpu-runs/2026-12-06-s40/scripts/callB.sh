#!/usr/bin/env bash
# Call B of stop 40: the projections fused at load (20f9f17) against the same binary with both
# fusions off (--disable-fused-qkv-a --disable-shared-experts-fusion), runs alternated:
# the decode-equivalent V3.2 model (batch 1 and 8, context 4096, d 0 and 3) twice each way, the
# README prompt (d 0 / 3) three times each way, then ncu of one MoE layer's decode forward (fused).
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep error -A3 $OUT/build.log | head; exit 1; }
off="--disable-fused-qkv-a --disable-shared-experts-fusion"
for round in 1 2; do
  for form in fused unfused; do
    flags=""; [ $form = unfused ] && flags="$off"
    echo "== V3.2 round $round $form"
    EXTRA_FLAGS="$flags" HBM_TBS=3.35 BATCHES="1 8" CONTEXTS=4096 NEW_TOKENS=64 RUN_SECONDS=120 \
      scripts/bench_v32.sh build-gpu $OUT/v32_${form}_$round 2>&1 | grep -E "^ +[0-9]|FAILED"
  done
done
for form in fused unfused; do
  flags=""; [ $form = unfused ] && flags="$off"
  echo "== README prompt $form"
  EXTRA_FLAGS="$flags" REPEAT=3 scripts/bench_readme.sh build-gpu 2>&1 | tail -5
done
echo "== ncu, 2 layers (1 dense + 1 MoE), fused"
LAYERS=2 DENSE=1 RUN_SECONDS=200 scripts/profile_v32_forward.sh build-gpu $OUT/ncu_fused > /dev/null 2>&1
head -3 $OUT/ncu_fused/last_decode_forward.txt
grep -E "linear_fp8|grouped|nvjet|moe_|swiglu" $OUT/ncu_fused/last_decode_forward.txt | tail -14
rm -rf $OUT/v32_*/v32-decode-equivalent $OUT/ncu_fused/ncu.csv $OUT/ncu_fused/model
