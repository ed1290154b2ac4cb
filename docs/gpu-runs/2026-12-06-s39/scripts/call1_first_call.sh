#!/usr/bin/env bash
# Stop 39's first device call: the complete racecheck the landed kernel lacks (its FP8 producer
# warps sync with __syncwarp only since 738b412), then three variants of it against HEAD and
# FlashMLA: l2pf (each FP8 row prefetched into L2 a tile before its cp.async, list entries two
# tiles ahead), allvalid2 (no mask selects when a tile's 64 flags are all set) and both (l2pfav);
# then tools/probe_dsmem_bandwidth.cu (never run yet) for the crossover question.
# Prepare on the host first (the checkout does not keep .scratch):
#   scripts/fetch_gpu_deps.sh && mkdir -p .scratch/var && cp ../shared/anchors/bin/* .scratch/
#   for v in l2pf allvalid2 l2pfav; do cp dsa/kernels/sparse_mla/sparse_mla_wgmma.cuh .scratch/var/$v.cuh
#     patch .scratch/var/$v.cuh docs/gpu-runs/2026-12-06-s38/next/$v.patch; done
#   cp docs/gpu-runs/2026-12-06-s38/variants/run_variants.sh .scratch/s37_var.sh
# Run with carry [".deps", ".scratch"]: bash docs/gpu-runs/2026-12-06-s38/next/first_call.sh
set -u
T0=$(date +%s); ph() { echo "[next $(( $(date +%s) - T0 ))s] $*"; }
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target sparse_mla_cuda_test > $OUT/build_test.log 2>&1 || echo "BUILD FAIL"
t=$(find build-gpu -name sparse_mla_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 240 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 99 \
  $t --gtest_brief=1 --gtest_filter='*Fp8*:*ManyRows*:*Prefill*SmallShapes*' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $OUT/racecheck.log | tr '\n' ' ')"
ph "racecheck"
VARIANTS="l2pf allvalid2 l2pfav" DEFAULT_MODE="base l2pf l2pfav" NCU_VARIANTS="base l2pf" \
  bash .scratch/s37_var.sh 2>&1 | grep -v "^$" | grep -v "^anchor\|^bench="
ph "variants"
# The crossover's open question (bench/RESULTS.md 2026-12-05): distributed shared memory's rate.
nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -ccbin /usr/bin/g++ \
  tools/probe_dsmem_bandwidth.cu -o /tmp/probe_dsmem && timeout 60 /tmp/probe_dsmem | tail -12
ph "done"
