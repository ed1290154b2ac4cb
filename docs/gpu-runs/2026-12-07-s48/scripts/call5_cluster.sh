#!/usr/bin/env bash
# Stop 48's third call (carry [".deps"]): the verify's acceptance counted in its sampling launch
# (a cluster per request, the landed form) against a second count launch (DSA_ACCEPT_CLUSTER=off),
# on the README prompt, alternated, two rounds, and kernel by kernel; the acceptance gpu tests with
# memcheck and racecheck; the engine benchmark with its device profile.
set -u
. scripts/device_call.sh
call_begin call_cluster
call_build dsa acceptance_cuda_test
t=$(find build-gpu -name acceptance_cuda_test -type f -executable | head -1)
timeout 120 "$t" >"$W/acceptance_test.log" 2>&1
echo "acceptance_cuda_test rc=$? $(grep -cE 'OK \]' "$W/acceptance_test.log") ok, $(grep -cE 'FAILED \]' "$W/acceptance_test.log") failed"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 99 "$t" --gtest_brief=1 \
    --gtest_filter='*CountLaunch*:*BadRequest*:*KeptDrafts*' >"$W/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$W/$tool.log")"
done
bundle
for round in 1 2; do
  for c in off on; do
    DSA_ACCEPT_CLUSTER=$c REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme_${c}_r$round.log" 2>&1
    echo "DSA_ACCEPT_CLUSTER=$c round $round: $(grep -E '^d [03] median' "$W/readme_${c}_r$round.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme_${c}_r$round.log")"
  done
done
bundle
DSA_ACCEPT_CLUSTER=off DRAFTS=3 timeout 40 scripts/trace_step.sh build-gpu "$W/trace_off" >"$W/trace_off.log" 2>&1
echo "trace (cluster off) rc=$?"; cat "$W/trace_off.log"
rm -f "$W"/trace_off/*.so; gzip -f "$W"/trace_off/*.csv; bundle
PROFILE=1 RUNS=on:device timeout 150 scripts/bench_engine.sh build-gpu >"$W/engine_bench.log" 2>&1
echo "engine bench rc=$?"; cat "$W/engine_bench.log"
bundle; echo "all done $(el) s"
