#!/usr/bin/env bash
# The next stop's second call, on the same warm machine (carry [".deps"]): issue 15's README
# prompt with the copy engine (DSA_KERNEL_COPY=0: the one 50 KB upload of before) against the
# kernels (the used part of each region, some 70-220 bytes), alternated, two rounds; the step
# kernel by kernel with kernels; memcheck on the copies' test; the engine benchmark with its
# device profile.
set -u
. scripts/device_call.sh
call_begin call_step
call_build dsa pinned_copy_cuda_test
t=$(find build-gpu -name pinned_copy_cuda_test -type f -executable | head -1)
timeout 60 "$t" >"$W/pinned_copy_test.log" 2>&1
echo "pinned_copy_cuda_test rc=$? $(grep -cE 'OK \]' "$W/pinned_copy_test.log") ok"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 "$t" --gtest_brief=1 \
  >"$W/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -m1 'ERROR SUMMARY' "$W/memcheck.log")"
for round in 1 2; do
  for k in 0 1; do
    DSA_KERNEL_COPY=$k REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme_k${k}_r$round.log" 2>&1
    echo "DSA_KERNEL_COPY=$k round $round: $(grep -E '^d3 / d0' "$W/readme_k${k}_r$round.log")"
  done
done
bundle
timeout 60 scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
echo "trace rc=$?"; cat "$W/trace.log"
rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle
PROFILE=1 RUNS=on:device timeout 200 scripts/bench_engine.sh build-gpu >"$W/engine_bench.log" 2>&1
echo "engine bench rc=$?"; cat "$W/engine_bench.log"
bundle; echo "all done $(el) s"
