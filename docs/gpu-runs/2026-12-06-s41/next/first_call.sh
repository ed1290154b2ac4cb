#!/usr/bin/env bash
# Stop 42's first device call: what stop 41 landed after its last GPU run (the budget was spent):
# the review fixes (26e5e3b: attention_prologue_cuda_fuses, the prologue's edge rows and latent
# column check, indexer_query's bounded CPU agreement, DSA_LINEAR_FEW_TOKENS=narrow for linear only,
# the sparse-MLA split switch read once) and the model's independent unfused path (3c02b86).
# The op tests first (they are what changed), then the whole gpu_check without the kernel benches.
# Run with carry [".deps"]: bash docs/gpu-runs/2026-12-06-s41/next/first_call.sh
set -u
bash docs/gpu-runs/2026-12-06-s41/scripts/call6.sh
SKIP_BENCH=1 SKIP_SAN=1 scripts/gpu_check.sh 2>&1 | grep -vE "Test command|TEST_EXECUTABLE|TEST_FILTER|Start |^[0-9]+: " | tail -12
grep -hE "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest_gpu.log $OUT/ctest_e2e.log | head -10
