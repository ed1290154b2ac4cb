#!/usr/bin/env bash
# Stop 48's fourth call (carry [".deps"]): DSA_ACCEPT_CLUSTER on against off on one machine: the
# engine benchmark's device step at d = 3, batch 1 / 8 / 32 (device profile), alternated; the
# d = 3 step kernel by kernel each way.
set -u
. scripts/device_call.sh
call_begin call_cluster2
call_build dsa
for c in off on off on; do
  DSA_ACCEPT_CLUSTER=$c PROFILE=1 RUNS=on:device DRAFTS=3 timeout 40 scripts/bench_engine.sh build-gpu \
    >"$W/engine_$c.log" 2>&1
  echo "DSA_ACCEPT_CLUSTER=$c: $(grep -oE 'device ms/step: step [0-9.]+' "$W/engine_$c.log" | awk '{print $4}' | tr '\n' ' ') (batch 1 8 32, ms per device step)"
done
bundle
for c in off on; do
  DSA_ACCEPT_CLUSTER=$c DRAFTS=3 timeout 30 scripts/trace_step.sh build-gpu "$W/trace_$c" >"$W/trace_$c.log" 2>&1
  echo "trace $c: $(grep '^step ' "$W/trace_$c.log")"
done
rm -f "$W"/trace_*/*.so; gzip -f "$W"/trace_*/*.csv; bundle; echo "all done $(el) s"
