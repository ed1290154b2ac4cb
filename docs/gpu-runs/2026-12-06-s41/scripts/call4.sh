#!/usr/bin/env bash
# Stop 41, call 4 (right after call 3, warm build-gpu): the fused row ops on against off, one
# binary, same call: the decode-equivalent V3.2 (batch 1 and 8, d 0 and 3) and the README prompt
# on the tiny model (d 0 / 3, 3 runs each way, alternated).
set -u
[ -x build-gpu/dsa/cli/dsa ] || { echo "no build-gpu: machine not warm"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for form in on off; do
  flags=""; [ $form = off ] && flags="--disable-fused-row-ops"
  echo "== README prompt row ops $form"
  EXTRA_FLAGS="$flags" REPEAT=3 scripts/bench_readme.sh build-gpu 2>&1 | tail -5
done
for form in on off; do
  flags=""; [ $form = off ] && flags="--disable-fused-row-ops"
  echo "== V3.2 row ops $form $(date +%T)"
  EXTRA_FLAGS="$flags" PROFILE=1 HBM_TBS=3.35 BATCHES="${BATCHES:-1 8}" CONTEXTS=4096 NEW_TOKENS=64 \
    RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_$form
done
# Sparse MLA beside FlashMLA (issue 14's peer mode: FP8-656, H 128, K 2048, 32K contexts, cold L2),
# two rounds each, alternated. Needs .anchors (carry [".deps", ".anchors"]).

sm=$(find build-gpu -name sparse_mla_bench -type f -executable | head -1)
SA=(); for s in b=32,s_q=1 b=32,s_q=2 b=32,s_q=4 b=128,s_q=1 b=128,s_q=2 b=128,s_q=4; do SA+=(--shape $s); done
for round in 1 2; do
  echo "== FlashMLA round $round"; timeout 60 .anchors/bin/flashmla_sparse_decode "${SA[@]}" --iters 50 2>&1 | grep -E "^anchor|FAIL" | head -8
  echo "== dsa round $round"; timeout 60 $sm "${SA[@]}" --iters 50 2>&1 | grep -E "^bench|FAIL" | head -8
done
