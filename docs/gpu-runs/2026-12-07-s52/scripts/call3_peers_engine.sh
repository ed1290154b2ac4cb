#!/usr/bin/env bash
# Stop 52, call 3 (carry [".deps", ".anchors"]): dsa's indexer, top-k and sparse MLA kernels side by
# side with the peer anchors (scripts/bench_vs_peers.sh), then the engine bench at batch 1, 8 and 32,
# d = 0 and 3, graphs on with sampling on the device, with the device-time profile.
set -u
. scripts/device_call.sh
call_begin call3
OUT=$W/peers timeout 200 scripts/bench_vs_peers.sh 2>&1 | tail -40
bundle
call_build dsa
BATCHES="1 8 32" RUNS="on:device" DRAFTS="0 3" PROFILE=1 \
  timeout $((560 - $(el))) scripts/bench_engine.sh build-gpu >"$W/engine_bench.log" 2>&1
echo "engine bench rc=$?"; cat "$W/engine_bench.log"
bundle; echo "all done $(el) s"
