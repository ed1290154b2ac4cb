#!/usr/bin/env bash
# Stop 43's second device call: where the time goes, for issues 15 and 16: the tiny model's d = 3
# step (per-forward costs) and the V3.2 4-row verify against a decode (1.22x), ncu per kernel,
# each bundled (the device returns at most 8 files). Builds dsa if the machine is fresh.
# Run with carry [".deps"]: bash docs/gpu-runs/2026-12-06-s42/next/second_call.sh
set -u
. scripts/gpu_build_env.sh
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa > /tmp/build.log 2>&1 || { echo BUILD FAIL; tail -20 /tmp/build.log; exit 1; }
# Where the tiny model's d = 3 step goes (issue 15: the per-forward costs), bundled (8-file limit).
RUN_SECONDS=45 scripts/profile_tiny_verify.sh build-gpu /tmp/prof 2>&1 | head -16
tar czf $OUT/prof.tgz -C /tmp prof
# Where the V3.2 4-row verify's extra 22% over a decode goes (bench/RESULTS.md 2026-12-06).
RUN_SECONDS=150 scripts/profile_v32_verify.sh build-gpu /tmp/pv 2>&1 | head -30
tar czf $OUT/pv.tgz -C /tmp pv
