#!/usr/bin/env bash
# Stop 47, call 1: gpu_check on the landed tree (build, every gpu test, the whole-model ones
# verbose; no sanitizer, no benchmarks: kernels unchanged since stop 44's tree eb43949), then the
# narrow checkpoint's teacher-forced figures pulled out of the verbose log. Bundled into
# $OUT/call1.tgz every minute, so a cut call still returns what finished. With the time left: the
# decode step kernel by kernel (scripts/trace_step.sh) and the README prompt. Carry [".deps"].
set -u
W=/tmp/call1; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call1.tgz" -C /tmp call1; }
( while sleep 60; do bundle; done ) & keeper=$!
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 SKIP_SAN=1 GPU_TEST_SECONDS=230 \
  timeout 575 scripts/gpu_check.sh 2>&1 | tail -30
echo "== narrow checkpoint ($(el) s)"
grep -hE "teacher|depth|control|divergen|NarrowCheckpoint.*(OK|FAILED)" "$W/check/ctest_e2e.log" | head -30
# What time is left (the call's cap is 600 s): the decode step kernel by kernel, README prompt.
left=$(( 590 - $(el) ))
if [ "$left" -gt 40 ]; then
  echo "== trace, README prompt d = 0 and 3 ($(el) s)"
  timeout $(( left - 5 )) scripts/trace_step.sh build-gpu "$W/trace" > "$W/trace.log" 2>&1; echo "trace rc=$?"
  cat "$W/trace.log"; rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv
fi
left=$(( 590 - $(el) ))
if [ "$left" -gt 40 ]; then
  REPEAT=2 timeout $(( left - 5 )) scripts/bench_readme.sh build-gpu > "$W/readme.log" 2>&1; echo "readme rc=$?"
  tail -8 "$W/readme.log"
fi
kill $keeper; bundle; echo "all done $(el) s"
