#!/usr/bin/env bash
# Stop 49, call 5 (carry [".deps"]): the greedy drafts (and greedy plain decoding) on a kernel of
# the argmax alone (acceptance_greedy_kernel, 192 B of shared memory) instead of the sampling
# kernel (34 KB; ncu in call 4: ~10 us a launch, the SM active for ~3.6 of them). Its gpu tests;
# the README prompt with DSA_ACCEPT_GREEDY own / generic alternated, two rounds; the step kernel
# by kernel; the engine benchmark; memcheck on the new test, as time allows.
set -u
. scripts/device_call.sh
call_begin call5_greedy
call_build dsa acceptance_cuda_test
t=$(find build-gpu -name acceptance_cuda_test -type f -executable | head -1)
timeout 120 "$t" >"$W/acceptance_cuda_test.log" 2>&1
echo "acceptance_cuda_test rc=$? $(grep -cE 'OK \]' "$W/acceptance_cuda_test.log") ok, $(grep -cE 'FAILED \]' "$W/acceptance_cuda_test.log") failed"
grep -E "FAILED|Failure" -A4 "$W/acceptance_cuda_test.log" | head -20
bundle
for round in 1 2; do
  [ "$round" = 2 ] && [ "$(el)" -gt 300 ] && break
  for g in generic own; do
    DSA_ACCEPT_GREEDY=$g REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme_${g}_r$round.log" 2>&1
    echo "DSA_ACCEPT_GREEDY=$g round $round: $(grep -E '^d [03] median' "$W/readme_${g}_r$round.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme_${g}_r$round.log")"
  done
done
bundle
timeout 60 scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
echo "trace rc=$?"; cat "$W/trace.log"
grep -E "acceptance|step_commit" "$W/trace/timeline_d3.txt" | head -12
grep -E "acceptance" "$W/trace/timeline_d0.txt" | head -3
rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle
if [ "$(el)" -lt 260 ]; then
  PROFILE=1 RUNS=on:device timeout $((400 - $(el))) scripts/bench_engine.sh build-gpu >"$W/engine_bench.log" 2>&1
  echo "engine bench rc=$?"; tail -14 "$W/engine_bench.log"
  bundle
fi
if [ "$(el)" -lt 360 ]; then
  timeout $((405 - $(el))) compute-sanitizer --tool memcheck --error-exitcode 99 "$t" --gtest_brief=1 \
    --gtest_filter='*Greedy*' >"$W/memcheck.log" 2>&1
  echo "memcheck rc=$? $(grep -m1 -E 'ERROR SUMMARY' "$W/memcheck.log")"
fi
bundle; echo "all done $(el) s"
