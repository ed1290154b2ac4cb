#!/usr/bin/env bash
# Stop 44, call 2 (H200): the tiny model's engine bench (issue 15's table), then the
# decode-equivalent V3.2 over batch 1/8/32 x context 4K/32K at d = 0/3 (issue 16's table).
set -u
W=/tmp/call2; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call2.tgz" -C /tmp call2; }
nvidia-smi --query-gpu=name --format=csv,noheader
cmake --build build-gpu -j16 > "$W/build.log" 2>&1 || echo BUILD FAIL
timeout 170 scripts/bench_engine.sh build-gpu > "$W/engine_bench.log" 2>&1; echo "engine rc=$?"
tail -20 "$W/engine_bench.log"; bundle
echo "== V3.2 ($(el) s)"
BATCHES="1 8 32" CONTEXTS="4096 32768" DRAFTS="0 3" PROFILE=1 HBM_TBS=4.28 RUN_SECONDS=100 \
  timeout $((585 - $(el))) scripts/bench_v32.sh build-gpu "$W/v32" 2>&1 | grep -vE "done in" | tail -16
bundle; echo "all done $(el) s"
