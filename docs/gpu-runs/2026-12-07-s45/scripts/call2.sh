#!/usr/bin/env bash
# Stop 45, call 2: the narrow checkpoint's teacher-forced case rewritten (every expert active, so no
# router decision can flip; the greedy cases ran in call 1), and the NCCL two-processes-on-one-GPU
# probe with its output unbuffered (call 1's children left by _exit and lost their lines).
set -u
W=/tmp/call2; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call2.tgz" -C /tmp call2; }
. scripts/gpu_build_env.sh
gpu_env "$W/env.txt" | head -3
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 --target dsa narrow_checkpoint_cuda_test > "$W/build.log" 2>&1 || { echo BUILD FAIL; grep error -A3 "$W/build.log" | head; exit 1; }
echo "build $(el) s"
t=$(find build-gpu -name narrow_checkpoint_cuda_test -type f -executable | head -1)
DSA_CHECKED=1 timeout 120 "$t" --gtest_filter="*TeacherForced*" > "$W/narrow.log" 2>&1; echo "narrow rc=$?"
grep -E "teacher|OK \]|FAILED|Failure|Expected|Which is|actual|router" "$W/narrow.log" | head -24
bundle
nvcc -O1 -o "$W/nccl_one_gpu" docs/gpu-runs/2026-12-07-s45/scripts/nccl_two_ranks_one_gpu.cc -lnccl > "$W/nccl_one_gpu.build" 2>&1 || tail -3 "$W/nccl_one_gpu.build"
CUDA_VISIBLE_DEVICES=0 NCCL_DEBUG=WARN timeout 60 "$W/nccl_one_gpu" > "$W/nccl_one_gpu.log" 2>&1; echo "nccl one gpu rc=$?"
grep -v "^$" "$W/nccl_one_gpu.log" | tail -12
rm -f "$W/nccl_one_gpu"; bundle; echo "all done $(el) s"
