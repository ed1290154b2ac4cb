#!/usr/bin/env bash
# Stop 48's measuring call (carry [".deps"]): the tree with the transitions' cuts (the early host
# read of host-to-device copies, the logits row's head loaded before the acceptance's params, the
# step commit's independent loads first). Builds; runs the gpu tests of what changed, memcheck and
# racecheck on the copies' test; the README prompt with DSA_COPY_PREFETCH 0 against 1, alternated,
# two rounds; the step kernel by kernel.
set -u
. scripts/device_call.sh
call_begin call_new
call_build dsa pinned_copy_cuda_test step_commit_cuda_test acceptance_cuda_test sampling_cuda_test
for t in pinned_copy_cuda_test step_commit_cuda_test acceptance_cuda_test sampling_cuda_test; do
  b=$(find build-gpu -name "$t" -type f -executable | head -1)
  timeout 120 "$b" >"$W/$t.log" 2>&1
  echo "$t rc=$? $(grep -cE 'OK \]' "$W/$t.log") ok, $(grep -cE 'FAILED \]' "$W/$t.log") failed"
done
t=$(find build-gpu -name pinned_copy_cuda_test -type f -executable | head -1)
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 99 "$t" --gtest_brief=1 \
    >"$W/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -m1 'ERROR SUMMARY' "$W/$tool.log")"
done
bundle
for round in 1 2; do
  for k in 0 1; do
    DSA_COPY_PREFETCH=$k REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme_p${k}_r$round.log" 2>&1
    echo "DSA_COPY_PREFETCH=$k round $round: $(grep -E '^d [03] median' "$W/readme_p${k}_r$round.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme_p${k}_r$round.log")"
  done
done
bundle
timeout 60 scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
echo "trace rc=$?"; cat "$W/trace.log"
rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle; echo "all done $(el) s"
