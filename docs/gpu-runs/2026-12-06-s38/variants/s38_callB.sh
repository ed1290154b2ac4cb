#!/usr/bin/env bash
# Session 38 call B (machine warm, build-gpu kept): the dsa CLI, the V3.2 decode-equivalent at
# b1 4K d0/d3, the README-prompt bench and the engine bench.
set -u
t0=${T0:-$(date +%s)}; ph() { echo "[B $(( $(date +%s) - t0 ))s] $*"; }
left() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && HBM=3.35
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa > $OUT/build_all.log 2>&1 || { echo BUILD FAIL; grep error $OUT/build_all.log | head; }
ph "dsa built"
mkdir -p /tmp/v32
BATCHES=1 CONTEXTS=4096 DRAFTS="0 3" HBM_TBS=${HBM:-4.28} RUN_SECONDS=150 scripts/bench_v32.sh build-gpu /tmp/v32 2>&1 | tail -6
grep -hE "nodes" /tmp/v32/*.log | head -4 | cut -c1-200
ph "v32 done"
left 420 && REPEAT=3 scripts/bench_readme.sh build-gpu 2>&1 | tail -8
ph "readme done"
left 470 && PROFILE=1 RUNS="on:device" BATCHES="1 8 32" scripts/bench_engine.sh build-gpu 2>&1 | tail -16
ph "engine done"
