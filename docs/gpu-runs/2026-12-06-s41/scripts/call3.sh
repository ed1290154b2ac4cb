#!/usr/bin/env bash
# Stop 41, call 3: the fused row-transform ops (attention_prologue, indexer_query) in the model:
# build, the ops' GPU tests, the whole-model bit-identity test (fused row ops against the separate
# ops on the device), CUDA-vs-CPU logits, graph replay; then call4.sh's measurements on the same
# build (row ops on/off: README prompt, decode-equivalent V3.2; sparse MLA beside FlashMLA).
# Carry [".deps", ".anchors"].
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
t0=$(date +%s)
cmake --build build-gpu -j16 --target dsa tiny_model_cuda_test graph_replay_cuda_test \
  attention_prologue_cuda_test indexer_query_cuda_test sparse_mla_bench > $OUT/build.log 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 $OUT/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s, warnings: $(grep -c warning $OUT/build.log)"
for t in attention_prologue_cuda_test indexer_query_cuda_test; do
  b=$(find build-gpu -name $t -type f -executable | head -1)
  echo "== $t: $(DSA_CHECKED=1 timeout 120 $b --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure" | head -6 | tr '\n' ' ')"
done
tm=$(find build-gpu -name tiny_model_cuda_test -type f -executable | head -1)
timeout 150 $tm 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED) |Failure|prompt of|divergence" | head -30
gr=$(find build-gpu -name graph_replay_cuda_test -type f -executable | head -1)
timeout 150 $gr --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure" | head -6
echo "tests done $(( $(date +%s) - t0 )) s"
bash docs/gpu-runs/2026-12-06-s41/scripts/call4.sh
echo "all done $(( $(date +%s) - t0 )) s"
