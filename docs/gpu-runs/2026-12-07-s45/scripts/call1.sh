#!/usr/bin/env bash
# Stop 45, call 1 (stop 44's call 3, not run then, plus the NCCL two-ranks-on-one-GPU probe): the narrow checkpoint's new teacher-forced case, issue 15's done-when (the README's prompt, d = 0 against d = 3,
# scripts/bench_readme.sh), issue 16's GEMM table (linear_bench fp8 at T 1/4/32/128/4096), then
# the decode-equivalent V3.2 at batch 8, context 32K with the time left (its prefill alone is
# ~100 s per run). Bundled into $OUT/call1.tgz after each phase.
set -u
W=/tmp/call1; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call1.tgz" -C /tmp call1; }
. scripts/gpu_build_env.sh
gpu_env "$W/env.txt" | head -3
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 --target dsa linear_bench narrow_checkpoint_cuda_test > "$W/build.log" 2>&1 || { echo BUILD FAIL; grep error -A3 "$W/build.log" | head; exit 1; }
echo "build $(el) s"
t=$(find build-gpu -name narrow_checkpoint_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 90 "$t" > "$W/narrow.log" 2>&1; echo "narrow rc=$?"
grep -E "teacher|OK|FAILED|Failure|Expected|Which is" "$W/narrow.log" | head -16
echo "== dsa generate as one rank process over NCCL (world size 1) against the plain run"
dsa=build-gpu/dsa/cli/dsa; p=(--model models/tiny-dsa --prompt "And the king said unto" --device cuda --json --max-new-tokens 32 --speculative-algorithm NEXTN --speculative-num-steps 3)
timeout 60 $dsa generate "${p[@]}" > "$W/plain.json" 2> "$W/plain.err"; echo "plain rc=$?"
timeout 90 $dsa generate "${p[@]}" --dp 1 --dp-processes > "$W/nccl1.json" 2> "$W/nccl1.err"; echo "nccl world 1 rc=$?"
tok() { grep -o '"token_ids":\[[0-9,]*\]' "$1"; }
[ -n "$(tok "$W/plain.json")" ] && [ "$(tok "$W/plain.json")" = "$(tok "$W/nccl1.json")" ] && echo "nccl world 1: tokens equal the plain run's" || echo "nccl world 1: TOKENS DIFFER"
grep -o '"graph_replays":[0-9]*\|"dp":{[^}]*}' "$W/nccl1.json"; tail -2 "$W/nccl1.err"
timeout 60 $dsa generate "${p[@]}" --dp 2 > "$W/nccl2.json" 2> "$W/nccl2.err"; echo "two ranks on one GPU rc=$?"; tail -2 "$W/nccl2.err"
echo "== NCCL: two processes on one GPU ($(el) s)"
nvcc -O1 -o "$W/nccl_one_gpu" docs/gpu-runs/2026-12-07-s45/scripts/nccl_two_ranks_one_gpu.cc -lnccl > "$W/nccl_one_gpu.build" 2>&1 || tail -3 "$W/nccl_one_gpu.build"
CUDA_VISIBLE_DEVICES=0 NCCL_DEBUG=WARN timeout 60 "$W/nccl_one_gpu" > "$W/nccl_one_gpu.log" 2>&1; echo "nccl one gpu rc=$?"; grep -v "^$" "$W/nccl_one_gpu.log" | tail -8
bundle
REPEAT=3 timeout 120 scripts/bench_readme.sh build-gpu > "$W/readme.log" 2>&1; echo "readme rc=$?"
tail -12 "$W/readme.log"; bundle
lb=$(find build-gpu -name linear_bench -type f -executable | head -1)
echo "== linear_bench ($(el) s)"
timeout 220 "$lb" fp8 1 4 32 128 4096 > "$W/linear_bench.log" 2>&1; echo "linear rc=$?"
grep -E "fp8" "$W/linear_bench.log" | head -40; bundle
left=$((${TOTAL:-560} - $(el)))
echo "== V3.2 b8 ctx32K ($(el) s, $left s left)"
[ "$left" -gt 120 ] && BATCHES=8 CONTEXTS=32768 DRAFTS="0 3" PROFILE=1 HBM_TBS=4.28 RUN_SECONDS=$((left / 2 - 5)) \
  timeout "$left" scripts/bench_v32.sh build-gpu "$W/v32" 2>&1 | grep -vE "done in" | tail -6
bundle; echo "all done $(el) s"
