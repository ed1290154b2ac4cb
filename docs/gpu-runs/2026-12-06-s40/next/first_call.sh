#!/usr/bin/env bash
# Stop 41's first device call: what stop 40 landed after its last GPU run (the budget was spent):
# the q_b + wq_b fusion with RoPE out of place (764c10b), the review fixes (c10f5d9). The whole
# gpu_check (tests, whole-model tests, the 5-layer V3.2 FP8 run, sanitizers on the changed ops),
# then the decode-equivalent V3.2 with every fusion against q_b's off and all off, same binary.
# Run with carry [".deps"]: bash docs/gpu-runs/2026-12-06-s40/next/first_call.sh
set -u
SKIP_BENCH=1 SAN_TESTS='rope|moe_dispatch|latent_write|batched_linear' SAN_SECONDS_EACH=60 scripts/gpu_check.sh 2>&1 | tail -30
grep -E "fused at load" $OUT/v32_random.log | head -2
for form in all no_q_b none; do
  case $form in
    all) flags="" ;;
    no_q_b) flags="--disable-fused-q-b" ;;
    none) flags="--disable-fused-qkv-a --disable-fused-q-b --disable-shared-experts-fusion" ;;
  esac
  echo "== V3.2 $form"
  EXTRA_FLAGS="$flags" PROFILE=1 HBM_TBS=3.35 BATCHES="1 8" CONTEXTS=4096 NEW_TOKENS=64 \
    RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_$form
done
