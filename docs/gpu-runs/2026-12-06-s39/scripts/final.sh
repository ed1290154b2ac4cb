#!/usr/bin/env bash
# s39 final call: gpu_check on the landed tree (no V3.2 run, no kernel benchmarks), sanitizer on
# the acceptance and step-commit tests, racecheck on the acceptance's cluster count, SASS count.
set -u
SKIP_V32=1 SKIP_BENCH=1 SAN_TESTS='acceptance|step_commit' SAN_RACE_TESTS='step_commit' \
  SAN_SECONDS_EACH=90 bash scripts/gpu_check.sh
t=$(find build-gpu -name acceptance_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 99 \
  $t --gtest_brief=1 --gtest_filter='*BadKept*' > $OUT/racecheck_accept.log 2>&1
echo "racecheck acceptance (BadKept: d 3 cluster, d 9 count launch) rc=$? $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $OUT/racecheck_accept.log | tr '\n' ' ')"
grep -E "PASSED|FAILED|near-tie mismatches" $OUT/ctest_gpu.log | grep -iE "accept|kept" | head -20
grep -E "divergen|bit for bit|identical|Passed|Failed" $OUT/ctest_e2e.log | head -30
