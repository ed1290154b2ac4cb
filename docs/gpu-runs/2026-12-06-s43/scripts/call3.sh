#!/usr/bin/env bash
# Stop 43, call 3: the grouped FP8 tile width bounded by max_group_pairs (the MoE's rows), so the
# decode-equivalent V3.2's 4-row verify takes the decode tile (N = 8) instead of 16. Builds dsa,
# the grouped linear's GPU tests and bench; runs the tests (checked), the bench (the
# decode-equivalent MoE bounded vs the mean rule, one binary), V3.2 batch 1 ctx 4K d = 0 / 3
# twice, and the verify-vs-decode ncu profile; then gpu_check without benches and sanitizers (all
# gpu tests, the e2e tests, the 5-layer V3.2 run), memcheck / racecheck on the new test, and the
# side-by-side peer table while time is left. Carry [".deps", ".anchors"].
set -u
. scripts/gpu_build_env.sh
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call3.tgz" -C /tmp call3; }  # after each phase: a cut call still returns
W=/tmp/call3; mkdir -p $W
gpu_env $W/env.txt | head -1
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $W/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa moe_dispatch_cuda_test grouped_linear_fp8_bench > $W/build.log 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 $W/build.log | head -40; exit 1; }
echo "build $(el) s, warnings: $(grep -c warning $W/build.log)"
exe() { find build-gpu -name "$1" -type f -executable | head -1; }
echo "== moe_dispatch_cuda_test: $(DSA_CHECKED=1 timeout 120 $(exe moe_dispatch_cuda_test) --gtest_brief=1 2>&1 | tee $W/moe_dispatch_cuda_test.log | grep -E "PASSED|FAILED|Failure" | head -8 | tr '\n' ' ')"
timeout 90 $(exe grouped_linear_fp8_bench) > $W/grouped_bench.log 2>&1; echo "grouped bench rc=$?"
grep -E "equiv|T=1 " $W/grouped_bench.log
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
for round in 1 2; do
  echo "== V3.2 round $round ($(el) s)"
  BATCHES="1" CONTEXTS=4096 DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=120 \
    scripts/bench_v32.sh build-gpu /tmp/v32_$round 2>&1 | grep -vE "done in" | tail -3
  cat /tmp/v32_$round/bench_v32.jsonl >> $W/v32.jsonl
done
bundle
echo "== verify vs decode, ncu ($(el) s)"
RUN_SECONDS=150 scripts/profile_v32_verify.sh build-gpu $W/pv 2>&1 | head -24
bundle
echo "== gpu_check ($(el) s)"
OUT=$W/gc SKIP_BENCH=1 SKIP_SAN=1 scripts/gpu_check.sh 2>&1 | grep -vE "Test command|TEST_EXECUTABLE|TEST_FILTER|Start |^[0-9]+: |summary" | tail -6
grep -hE "tests passed|tests failed|\*\*\*Failed|Timeout" $W/gc/ctest_gpu.log $W/gc/ctest_e2e.log | head -10
t=$(exe moe_dispatch_cuda_test)
for tool in memcheck racecheck; do
  timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool $tool --error-exitcode 99 "$t" --gtest_brief=1 \
    --gtest_filter='GroupedLinearFp8Cuda.TilePairsBoundedByMaxGroupPairs' > $W/$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool.log | tail -1)"
done
bundle
if [ "$(el)" -lt 480 ]; then
  echo "== peers ($(el) s)"
  OUT=$W/peers timeout $((560 - $(el))) scripts/bench_vs_peers.sh 2>&1 | tail -30
fi
bundle
echo "all done $(el) s"
