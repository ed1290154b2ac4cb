#!/usr/bin/env bash
# Stop 41, call 2 (right after call 1, on the warm machine's build-gpu): the decode-equivalent
# V3.2 with every fusion, with q_b's off, and with all off; one binary, same call.
set -u
[ -x build-gpu/dsa/cli/dsa ] || { echo "no build-gpu: machine not warm"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for form in all no_q_b none; do
  case $form in
    all) flags="" ;;
    no_q_b) flags="--disable-fused-q-b" ;;
    none) flags="--disable-fused-qkv-a --disable-fused-q-b --disable-shared-experts-fusion" ;;
  esac
  echo "== V3.2 $form $(date +%T)"
  EXTRA_FLAGS="$flags" PROFILE=1 HBM_TBS=3.35 BATCHES="${BATCHES:-1 8}" CONTEXTS=4096 NEW_TOKENS=64 \
    RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 | grep -E "^ +[0-9]|FAILED|nodes"
  rm -rf $OUT/v32_$form
done
