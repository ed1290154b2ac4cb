#!/usr/bin/env bash
# Stop 49, call 3 (carry [".deps"]): the MTP layer's enorm and hnorm in one launch
# (rmsnorm_pair): its gpu tests and memcheck; the README prompt d = 0 / 3, two rounds; the step
# kernel by kernel (trace); the FP8 grouped MoE table with the new T = 4096 row; the engine
# benchmark with its device profile; then, with the time left, ncu of the kernels between the
# step's forwards (call2_profile.sh's loop).
set -u
. scripts/device_call.sh
call_begin call3_pair
call_build dsa rmsnorm_cuda_test grouped_linear_fp8_bench
t=$(find build-gpu -name rmsnorm_cuda_test -type f -executable | head -1)
timeout 120 "$t" >"$W/rmsnorm_cuda_test.log" 2>&1
echo "rmsnorm_cuda_test rc=$? $(grep -cE 'OK \]' "$W/rmsnorm_cuda_test.log") ok, $(grep -cE 'FAILED \]' "$W/rmsnorm_cuda_test.log") failed"
grep -E "FAILED|Failure" -A4 "$W/rmsnorm_cuda_test.log" | head -20
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 "$t" --gtest_brief=1 \
  --gtest_filter='RmsNormPairCuda.*' >"$W/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -m1 -E 'ERROR SUMMARY' "$W/memcheck.log")"
bundle
for round in 1 2; do
  REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu >"$W/readme_r$round.log" 2>&1
  echo "round $round: $(grep -E '^d [03] median' "$W/readme_r$round.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme_r$round.log")"
done
bundle
timeout 60 scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
echo "trace rc=$?"; cat "$W/trace.log"
rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle
g=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
timeout 120 "$g" >"$W/grouped_linear_fp8_bench.log" 2>&1
echo "grouped bench rc=$?"; cat "$W/grouped_linear_fp8_bench.log"
bundle
PROFILE=1 RUNS=on:device timeout 150 scripts/bench_engine.sh build-gpu >"$W/engine_bench.log" 2>&1
echo "engine bench rc=$?"; tail -25 "$W/engine_bench.log"
bundle
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$ncu_bin" ] && [ "$(el)" -lt 470 ]; then
  timeout $((580 - $(el))) "$ncu_bin" --cache-control none --clock-control none \
    --kernel-name regex:"acceptance|step_commit|copy_word_runs|pinned_copy" --launch-skip 60 \
    --launch-count 16 --section LaunchStats --section Occupancy --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters \
    build-gpu/dsa/cli/dsa generate --model models/tiny-dsa --prompt "And the king said unto" \
    --device cuda --max-new-tokens 48 --speculative-algorithm NEXTN --speculative-num-steps 3 \
    >"$W/ncu_gap_kernels.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Static Shared|Achieved Occ" \
    "$W/ncu_gap_kernels.txt" | head -60
fi
bundle; echo "all done $(el) s"
