#!/usr/bin/env bash
# Stop 44, call 1: gpu_check (build, every gpu test, memcheck + racecheck on the grouped linear's
# and the narrow checkpoint's tests; no benchmarks), then the grouped bench's decode-equivalent
# form and the peer table. Each phase is bundled into $OUT/call1.tgz as it ends, so a cut call
# still returns what finished.  Carry [".deps", ".anchors"].
set -u
W=/tmp/call1; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call1.tgz" -C /tmp call1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=$W/check SKIP_V32=1 SKIP_BENCH=1 ENGINE_BENCH=0 SAN_TESTS='moe_dispatch|narrow_checkpoint' \
  scripts/gpu_check.sh 2>&1 | tail -40
bundle
echo "== narrow checkpoint figures"
grep -hE "divergen|near|replay|NarrowCheckpoint" "$W/check/ctest_e2e.log" | head -12
bench=$(find build-gpu -name grouped_linear_fp8_bench -type f -executable | head -1)
echo "== grouped bench ($(el) s)"
timeout 120 "$bench" > "$W/grouped_bench.log" 2>&1; echo "grouped bench rc=$?"
grep -E "equiv|bounded|mean" "$W/grouped_bench.log" | head -12
bundle
echo "== peers ($(el) s)"
OUT=$W/peers timeout $((580 - $(el))) scripts/bench_vs_peers.sh 2>&1 | tail -30
bundle
echo "all done $(el) s"
