#!/usr/bin/env bash
# Stop 48's second measuring call (carry [".deps"]): the tree that also counts the verify's
# acceptance from shared memory (the drafts read before the sampling, every y_j through
# distributed shared memory) and issues the step commit's page-table and kept-token reads
# together. First the README prompt (DSA_COPY_PREFETCH 0 against 1, two rounds) and the step
# kernel by kernel; then every gpu test (the whole-model ones verbose) and the sanitizers on the
# acceptance, step commit and copy tests.
set -u
. scripts/device_call.sh
call_begin call_all
call_build dsa
for round in 1 2; do
  for k in 0 1; do
    DSA_COPY_PREFETCH=$k REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme_p${k}_r$round.log" 2>&1
    echo "DSA_COPY_PREFETCH=$k round $round: $(grep -E '^d [03] median' "$W/readme_p${k}_r$round.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme_p${k}_r$round.log")"
  done
done
timeout 60 scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
echo "trace rc=$?"; cat "$W/trace.log"
rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 GPU_TEST_SECONDS=200 \
  SAN_TESTS='pinned_copy|step_commit|acceptance' timeout $((585 - $(el))) scripts/gpu_check.sh 2>&1 | tail -16
grep -hE "teacher-forced:|divergences over" "$W/check/ctest_e2e.log" | head -12
bundle; echo "all done $(el) s"
