#!/usr/bin/env bash
# A next-stop call (carry [".deps"]; written for stop 49's last 230 s of device time, never run):
# plain greedy decoding on the argmax kernel with no params copy (OverlappedSampler, all_greedy):
# the whole-model gpu tests that decode greedily on the GPU against the CPU and graph replay
# against eager; the README prompt d = 0 / 3; the step kernel by kernel.
set -u
. scripts/device_call.sh
call_begin call2b_greedy_decode
call_build dsa tiny_model_cuda_test graph_replay_cuda_test engine_graphs_cuda_test
e2e='GraphReplay|EngineGraphs|TinyModelCuda'
(cd build-gpu && timeout 100 ctest -L gpu -R "$e2e" -j 4) >"$W/ctest_e2e.log" 2>&1
echo "whole-model tests: $(grep -E 'tests passed|tests failed' "$W/ctest_e2e.log")"
grep -hE "divergences over" "$W/ctest_e2e.log" | head -6
bundle
REPEAT=2 timeout 45 scripts/bench_readme.sh build-gpu >"$W/readme.log" 2>&1
echo "README: $(grep -E '^d [03] median' "$W/readme.log" | tr '\n' ' ') $(grep -E '^d3 / d0' "$W/readme.log")"
bundle
if [ "$(el)" -lt 165 ]; then
  timeout $((222 - $(el))) scripts/trace_step.sh build-gpu "$W/trace" >"$W/trace.log" 2>&1
  echo "trace rc=$?"; cat "$W/trace.log"
  grep -E "acceptance|pinned_copy|copy_word|row_copy" "$W/trace/timeline_d0.txt" | head -8
  rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv
fi
bundle; echo "all done $(el) s"
