#!/usr/bin/env bash
# s39 experiment: what the README ratio does with the PDL GEMV and without PDL.
set -u
. scripts/gpu_build_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
gpu_configure build-gpu > $OUT/cfg.log 2>&1
cmake --build build-gpu -j16 --target dsa > $OUT/build.log 2>&1 || { echo BUILD FAIL; tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - T0 ))s"
for cfg in default few pdl0 default few; do
  case $cfg in default) e=();; few) e=(DSA_LINEAR_FEW_TOKENS=1);; pdl0) e=(DSA_PDL=0);; esac
  echo "=== $cfg"
  env "${e[@]}" REPEAT=3 scripts/bench_readme.sh build-gpu 2>&1 | grep -E "median|d3 / d0"
done
echo "done $(( $(date +%s) - T0 ))s"
