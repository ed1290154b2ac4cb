#!/usr/bin/env bash
# Stop 44's first device call: what stop 43 could not run before its budget ran out. The grouped
# linear's GPU tests with the review's understated-hint case (bb6f125) and the new narrow-checkpoint
# CPU-vs-GPU test (never run); the grouped bench's
# decode-equivalent form (the MoE bounded by max_group_pairs against the mean rule, one binary; it
# failed in call 3 on a bench bug fixed in a7ff5e4); the peer table (bench_vs_peers.sh, cut in
# call 3); and the decode-equivalent V3.2 over batch 1 / 8 / 32 and context 4K / 32K at d = 0 / 3.
# Carry [".deps", ".anchors"]:   bash docs/gpu-runs/2026-12-06-s43/next/first_call.sh
set -u
. scripts/gpu_build_env.sh
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
W=/tmp/next1; mkdir -p "$W"
bundle() { tar czf "$OUT/next1.tgz" -C /tmp next1; }
gpu_env "$W/env.txt" | head -1
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 --target dsa grouped_linear_fp8_bench moe_dispatch_cuda_test \
  narrow_checkpoint_cuda_test > "$W/build.log" 2>&1 ||
  { echo BUILD FAIL; grep -E "error" -A3 "$W/build.log" | head -40; exit 1; }
echo "build $(el) s, warnings: $(grep -c warning "$W/build.log")"
t=$(find build-gpu -name moe_dispatch_cuda_test -type f -executable | head -1)
echo "== moe_dispatch_cuda_test: $(DSA_CHECKED=1 timeout 120 "$t" --gtest_brief=1 2>&1 | tee "$W/moe_dispatch_cuda_test.log" | grep -E "PASSED|FAILED|Failure" | head -8 | tr '\n' ' ')"
t=$(find build-gpu -name narrow_checkpoint_cuda_test -type f -executable | head -1)
echo "== narrow_checkpoint_cuda_test: $(DSA_CHECKED=1 timeout 240 "$t" 2>&1 | tee "$W/narrow_checkpoint_cuda_test.log" | grep -E "divergen|PASSED|FAILED|Failure" | head -12 | tr '\n' ' ')"
bench=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
timeout 120 "$bench" > "$W/grouped_bench.log" 2>&1; echo "grouped bench rc=$?"
grep -E "equiv|T=1 " "$W/grouped_bench.log"
bundle
echo "== peers ($(el) s)"
OUT=$W/peers timeout 200 scripts/bench_vs_peers.sh 2>&1 | tail -24
bundle
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.28 || echo 3.35)
echo "== V3.2 batches x contexts ($(el) s)"
BATCHES="1 8 32" CONTEXTS="4096 32768" DRAFTS="0 3" PROFILE=1 HBM_TBS=$hbm RUN_SECONDS=120 \
  timeout $((570 - $(el))) scripts/bench_v32.sh build-gpu "$W/v32" 2>&1 | grep -vE "done in" | tail -14
bundle
echo "all done $(el) s"
