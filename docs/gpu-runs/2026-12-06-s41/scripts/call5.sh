#!/usr/bin/env bash
# Stop 41, call 5 (the last): the whole gpu_check on the final tree (tests, whole-model tests, the
# 5-layer V3.2 run, sanitizers on the two new ops), then two switches measured against the
# defaults, one binary: the sparse MLA's fewest tiles per split (DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT
# 1 = default, 2, 4: kernel + combine at V3.2's decode shapes, 4K contexts, and the
# decode-equivalent V3.2 at batch 1) and the few-token GEMV for the narrow bf16 products only
# (DSA_LINEAR_FEW_TOKENS=narrow: V3.2 batch 1, the README prompt); FlashMLA's b 128 s_q 2 / 4
# beside dsa's (call 3's list cut them). Carry [".deps", ".anchors"].
set -u
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SKIP_BENCH=1 SAN_TESTS='attention_prologue|indexer_query' SAN_SECONDS_EACH=40 scripts/gpu_check.sh 2>&1 | \
  grep -vE "Test command|TEST_EXECUTABLE|TEST_FILTER|Start |^[0-9]+: " | tail -16
grep -E "fused at load" $OUT/v32_random.log | head -1
grep -hE "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest_gpu.log $OUT/ctest_e2e.log | head -10
echo "gpu_check done $(( $(date +%s) - t0 )) s"
sm=$(find build-gpu -name sparse_mla_bench -type f -executable | head -1)
for m in 1 2 4; do
  echo "== sparse MLA, min tiles per split $m"
  DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=$m timeout 60 $sm --shape b=1,s_q=1,ctx=4096 --shape b=1,s_q=4,ctx=4096 \
    --shape b=8,s_q=1,ctx=4096 --shape b=2,s_q=4,ctx=4096 --iters 50 2>&1 | grep -E "^bench|FAIL" | \
    sed -E 's/ (bytes|flops|roof_us|min_us|max_us|kv_GBps|copies|iters|gap_us|gate|cache|h_q|topk)=[^ ]*//g'
done
echo "== FlashMLA / dsa b 128 s_q 2, 4"
timeout 60 .anchors/bin/flashmla_sparse_decode --shape b=128,s_q=2 --shape b=128,s_q=4 --iters 50 2>&1 | grep -E "^anchor=flashmla_sparse_fp8_decode |FAIL"
timeout 60 $sm --shape b=128,s_q=2 --shape b=128,s_q=4 --iters 50 2>&1 | grep -E "^bench|FAIL" | sed -E 's/ (bytes|flops|min_us|max_us|copies|iters|gap_us|gate)=[^ ]*//g'
for form in m1 m2 m4 narrow; do
  e=(); case $form in m2) e=(DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=2);; m4) e=(DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT=4);; narrow) e=(DSA_LINEAR_FEW_TOKENS=narrow);; esac
  echo "== V3.2 b1 $form $(date +%T)"
  env "${e[@]}" PROFILE=1 HBM_TBS=3.35 BATCHES=1 CONTEXTS=4096 NEW_TOKENS=64 \
    RUN_SECONDS=120 scripts/bench_v32.sh build-gpu $OUT/v32_$form 2>&1 | grep -E "^ +[0-9]|FAILED"
  rm -rf $OUT/v32_$form
done
for form in default narrow; do
  e=(); [ $form = narrow ] && e=(DSA_LINEAR_FEW_TOKENS=narrow)
  echo "== README prompt $form"
  env "${e[@]}" REPEAT=2 scripts/bench_readme.sh build-gpu 2>&1 | tail -2
done
echo "all done $(( $(date +%s) - t0 )) s"
