#!/usr/bin/env bash
# Call C of stop 40: which fusion costs the prefill (TTFT rose 3.5-4.6% fused in call B), and the
# device's ms per decode step (--profile-device-time) at batch 1 and 8, each fusion alone.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa > $OUT/build.log 2>&1 || { echo BUILD FAIL; grep error -A3 $OUT/build.log | head; exit 1; }
for form in both qkv shared none; do
  case $form in
    both) flags="" ;;
    qkv) flags="--disable-shared-experts-fusion" ;;
    shared) flags="--disable-fused-qkv-a" ;;
    none) flags="--disable-fused-qkv-a --disable-shared-experts-fusion" ;;
  esac
  echo "== V3.2 $form"
  EXTRA_FLAGS="$flags" PROFILE=1 HBM_TBS=3.35 BATCHES="1 8" CONTEXTS=4096 NEW_TOKENS=64 RUN_SECONDS=120 \
    scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_$form/v32-decode-equivalent
done
