#!/usr/bin/env bash
# A next-stop call (carry [".deps"]; written for stop 49's last ~140 s of device time, which were
# too few to start a machine): the warm-up request and plain greedy decoding on the argmax kernel
# (248cad6), as `dsa generate --device cuda` runs them: the README prompt d = 0 / 3 once each, then
# the engine benchmark at batch 1 and 8.
set -u
. scripts/device_call.sh
call_begin call2_warmup
call_build dsa
REPEAT=1 timeout 30 scripts/bench_readme.sh build-gpu >"$W/readme.log" 2>&1
echo "README rc=$?"; tail -6 "$W/readme.log"
bundle
BATCHES="1 8" PROFILE=1 RUNS=on:device timeout $((128 - $(el))) scripts/bench_engine.sh build-gpu \
  >"$W/engine_bench.log" 2>&1
echo "engine bench rc=$?"; cat "$W/engine_bench.log"
bundle; echo "all done $(el) s"
