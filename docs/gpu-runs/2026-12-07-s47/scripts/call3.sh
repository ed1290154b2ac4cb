#!/usr/bin/env bash
# Stop 47, call 3: small copies between device and page-locked host memory as PDL kernels
# (cuda/pinned_copy.h) — the speculative step's metadata uploads, parameters and read-backs. Build,
# the new test, the README prompt with DSA_KERNEL_COPY=0 (the copy engine, as before) against the
# default (kernels), alternated in one call, the kernel trace with kernels, then the whole-model
# gpu tests that run the engine's copies. Carry [".deps"].
set -u
W=/tmp/call3; mkdir -p "$W"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
bundle() { tar czf "$OUT/call3.tgz" -C /tmp call3; }
. scripts/gpu_build_env.sh
gpu_env "$W/env.txt" | head -3
[ -f build-gpu/build.ninja ] || gpu_configure build-gpu > "$W/cfg.log" 2>&1
cmake --build build-gpu -j16 > "$W/build.log" 2>&1 || { echo BUILD FAIL; grep -E "error|FAILED" -A3 "$W/build.log" | head -30; bundle; exit 1; }
echo "build $(el) s, warnings $(grep -c warning "$W/build.log")"
t=$(find build-gpu -name pinned_copy_cuda_test -type f -executable | head -1)
timeout 60 "$t" > "$W/pinned_copy_test.log" 2>&1; echo "pinned_copy_cuda_test rc=$?"; grep -E "OK \]|FAILED|Failure" "$W/pinned_copy_test.log" | head
for round in 1 2; do
  for k in 0 1; do
    DSA_KERNEL_COPY=$k REPEAT=2 timeout 60 scripts/bench_readme.sh build-gpu > "$W/readme_k${k}_r$round.log" 2>&1
    echo "DSA_KERNEL_COPY=$k round $round: $(grep -E '^d3 / d0' "$W/readme_k${k}_r$round.log") | $(grep -E '^d [03] median' "$W/readme_k${k}_r$round.log" | tr '\n' ' ')"
  done
done
bundle
timeout 60 scripts/trace_step.sh build-gpu "$W/trace" > "$W/trace.log" 2>&1; echo "trace rc=$?"; cat "$W/trace.log"
rm -f "$W"/trace/*.so; gzip -f "$W"/trace/*.csv; bundle
echo "== whole-model gpu tests ($(el) s)"
left=$(( ${CALL_CAP:-580} - $(el) ))
(cd build-gpu && DSA_CHECKED=1 timeout $left ctest -L gpu -R 'TinyModelCuda|EngineGraphs|GraphReplay|StepCommit|AcceptanceCuda|Sampl|Overlap|PinnedCopy' -j 4 --output-on-failure) > "$W/ctest.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$W/ctest.log" | head -20
bundle; echo "all done $(el) s"
