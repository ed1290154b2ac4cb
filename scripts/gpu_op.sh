#!/usr/bin/env bash
# One op on the lent H200, quickly (the inner loop of kernel work; scripts/gpu_check.sh is the
# whole run): configure build-gpu as gpu_check.sh does, build only OP's GPU test and benchmark,
# print the SASS MMA instructions and register use of its kernels, run the test, compute-sanitizer
# memcheck and racecheck on it, then the benchmark with BENCH_ARGS.
#   scripts/gpu_op.sh paged_logits            env: BENCH_ARGS, SAN_FILTER, SKIP_SAN=1
# Logs in $OUT (or ./gpu-out): build.log, test.log, sanitizer.log, bench.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
op="${1:?usage: scripts/gpu_op.sh OP}"
. scripts/gpu_build_env.sh
gpu_start gpu_op gpu-out
gpu_env "$out/env.txt"

phase "build ${op}_cuda_test ${op}_bench"
if ! { gpu_configure "$build" &&
  cmake --build "$build" -j "$(nproc)" --target "${op}_cuda_test" "${op}_bench"; } >"$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A4 "$out/build.log" | head -60
  exit 1
fi
grep -E "warning" "$out/build.log" | head -20
lib=$(find "$build" -name "libdsa_op_${op}_cuda.a" | head -1)
echo "SASS MMA: $(cuobjdump -sass "$lib" | grep -oE '[A-Z]*MMA[.A-Z0-9]*' | sort | uniq -c | tr '\n' ' ')"
cuobjdump -res-usage "$lib" 2>/dev/null | grep -E "Function|REG" | paste - - | sed -E 's/ +/ /g' | cut -c1-200
test_bin=$(find "$build" -name "${op}_cuda_test" -type f | head -1)
bench_bin=$(find "$build" -name "${op}_bench" -type f | head -1)

phase "test"
timeout 300 "$test_bin" --gtest_brief=1 >"$out/test.log" 2>&1
echo "test rc=$?"
grep -E "PASSED|FAILED|SKIPPED|Failure" "$out/test.log" | head -30

: >"$out/sanitizer.log"
if [ "${SKIP_SAN:-0}" != 1 ]; then
  phase "compute-sanitizer"
  for tool in memcheck racecheck; do
    timeout "${SAN_SECONDS:-120}" compute-sanitizer --tool "$tool" --error-exitcode 99 "$test_bin" \
      --gtest_brief=1 --gtest_filter="${SAN_FILTER:--*V32*}" >>"$out/sanitizer.log" 2>&1
    echo "$tool rc=$?"
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.log" | sort | uniq -c
fi

phase "bench"
# shellcheck disable=SC2086  # BENCH_ARGS is a word list on purpose
timeout 240 "$bench_bin" ${BENCH_ARGS:-} >"$out/bench.log" 2>&1
echo "bench rc=$?"
cat "$out/bench.log" | tail -40
phase "done"
