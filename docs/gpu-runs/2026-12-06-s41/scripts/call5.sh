#!/usr/bin/env bash
# Stop 41, call 5 (the last): the sparse MLA's split count at few rows (how many 64-key tiles a
# split takes: DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT 1 = today, 2, 4), kernel + combine at the decode
# shapes of V3.2's batch 1 / verify / batch 8 (4K contexts) and the decode-equivalent V3.2 at batch
# 1; FlashMLA's b 128 s_q 2 / 4 beside dsa's (call 3's list cut them); then the whole gpu_check
# (tests, whole-model tests, the 5-layer V3.2 run, sanitizers on the two new ops).
# Carry [".deps", ".anchors"].
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 > $OUT/build0.log 2>&1 || { echo BUILD FAIL; grep -E "error" -A3 $OUT/build0.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
sm=$(find build-gpu -name sparse_mla_bench -type f -executable | head -1)
for m in 1 2 4 1 2 4; do
  echo "== sparse MLA, min tiles per split $m"
  DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=$m timeout 60 $sm --shape b=1,s_q=1,ctx=4096 --shape b=1,s_q=4,ctx=4096 \
    --shape b=8,s_q=1,ctx=4096 --shape b=2,s_q=4,ctx=4096 --iters 50 2>&1 | grep -E "^bench|FAIL" | \
    sed -E 's/ (bytes|flops|roof_us|min_us|max_us|kv_GBps|copies|iters|gap_us|gate|cache|h_q|topk)=[^ ]*//g'
done
for m in 1 2 4; do
  echo "== V3.2 b1, min tiles per split $m $(date +%T)"
  DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=$m PROFILE=1 HBM_TBS=3.35 BATCHES=1 CONTEXTS=4096 NEW_TOKENS=64 \
    RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_m$m 2>&1 | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_m$m
done
echo "== FlashMLA / dsa b 128 s_q 2, 4"
timeout 60 .anchors/bin/flashmla_sparse_decode --shape b=128,s_q=2 --shape b=128,s_q=4 --iters 50 2>&1 | grep -E "^anchor=flashmla_sparse_fp8_decode |FAIL"
timeout 60 $sm --shape b=128,s_q=2 --shape b=128,s_q=4 --iters 50 2>&1 | grep -E "^bench|FAIL" | sed -E 's/ (bytes|flops|min_us|max_us|copies|iters|gap_us|gate)=[^ ]*//g'
echo "measurements done $(( $(date +%s) - t0 )) s"
SKIP_BENCH=1 SAN_TESTS='attention_prologue|indexer_query' SAN_SECONDS_EACH=45 scripts/gpu_check.sh 2>&1 | \
  grep -vE "Test command|TEST_EXECUTABLE" | tail -22
grep -E "fused at load" $OUT/v32_random.log | head -1
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest_gpu.log $OUT/ctest_e2e.log | head -10
echo "all done $(( $(date +%s) - t0 )) s"
