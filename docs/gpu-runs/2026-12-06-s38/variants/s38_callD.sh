#!/usr/bin/env bash
# Session 38 call D: the landed tree through scripts/gpu_check.sh (every gpu test, the
# whole-model tests, compute-sanitizer on sparse MLA, its benchmark), then two peer rounds
# against FlashMLA and the SASS MMA count.
set -u
T0=$(date +%s)
SKIP_V32=1 SAN_TESTS=sparse_mla BENCH_ONLY=sparse_mla ENGINE_BENCH=0 GPU_TEST_SECONDS=200 \
  bash scripts/gpu_check.sh 2>&1 | grep -v "^anchor\|^bench=" | tail -60
S="--shape b=32,s_q=1 --shape b=32,s_q=2 --shape b=32,s_q=4 --shape b=128,s_q=1 --shape b=128,s_q=2 --shape b=128,s_q=4"
for round in 1 2; do
  echo "FLASHMLA $(.scratch/flashmla_sparse_decode $S --iters 30 2>&1 | tee -a $OUT/peer_flashmla.log | grep '^anchor=flashmla_sparse_fp8_decode ' | awk '{printf "%s ", $6}')"
  echo "dsa      $(build-gpu/bench/sparse_mla_bench $S --iters 30 2>&1 | tee -a $OUT/peer_dsa.log | grep '^bench' | awk '{printf "%s ", $6}')"
done
echo "[D $(( $(date +%s) - T0 ))s] done"
