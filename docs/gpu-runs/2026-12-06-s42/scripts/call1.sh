#!/usr/bin/env bash
# Stop 42, call 1: stop 41's review fixes on a GPU (op tests, then gpu_check without the kernel
# benches and the sanitizer), then where the tiny model's d = 3 step goes now (ncu per kernel of
# a d = 0 and a d = 3 run, eager). Carry [".deps"].
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bash docs/gpu-runs/2026-12-06-s41/next/first_call.sh
mkdir -p $OUT/prof
RUN_SECONDS=120 scripts/profile_tiny_verify.sh build-gpu $OUT/prof 2>&1 | tail -30
