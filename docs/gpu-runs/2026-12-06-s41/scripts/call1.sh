#!/usr/bin/env bash
# Stop 41, call 1: what stop 40 landed after its last GPU run (q_b + wq_b fusion, RoPE out of
# place, the review fixes, tile_grid): the whole gpu_check without the kernel benchmarks, the
# sanitizers on the changed ops. Carry [".deps"].
set -u
SKIP_BENCH=1 SAN_TESTS='rope|moe_dispatch|batched_linear' SAN_RACE_TESTS='rope' SAN_SECONDS_EACH=45 \
  scripts/gpu_check.sh 2>&1 | tail -30
grep -E "fused at load" $OUT/v32_random.log | head -2
grep -E "tests passed|tests failed|Failed|\*\*\*" $OUT/ctest_gpu.log | head -20
grep -E "tests passed|tests failed|Failed|\*\*\*" $OUT/ctest_e2e.log | head -20
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/sanitizer.log | head -20
