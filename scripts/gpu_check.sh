#!/usr/bin/env bash
# The one script run on the lent H200: configure with /usr/bin/g++ as C++ and CUDA host compiler,
# build with every core, run the gpu-labelled tests, compute-sanitizer (memcheck, racecheck) on
# them, then the CUDA benchmarks. Each phase has a time cap so the whole run fits one device call.
# Needs .deps/pcre2 (an unpacked Debian libpcre2-dev: scripts/fetch_gpu_deps.sh) in `carry`.
# Logs go to $OUT (or ./gpu-out): env.txt, build.log, ctest_gpu.log, ctest_e2e.log, sanitizer.log, bench.log,
# engine_bench.log (scripts/bench_engine.sh: the tiny model's decode with graphs on and off),
# v32_random.log (dsa generate --random-weights on a 5-layer V3.2-shaped config; SKIP_V32=1 skips).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_build_env.sh
gpu_start gpu_check gpu-out
gpu_env "$out/env.txt"

phase "configure + build"
gpu_configure "$build" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
if ! cmake --build "$build" -j "$(nproc)" >>"$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A4 "$out/build.log" | head -80
  # Build what does build, so the tests that exist still run.
  cmake --build "$build" -j "$(nproc)" -- -k 0 >>"$out/build.log" 2>&1
fi
grep -c "warning" "$out/build.log" | xargs echo "build warnings:"
# Which tensor-core instructions the DSA kernels compiled to (fp8 MMA for the indexer).
for lib in paged_logits ragged_logits paged_logits_topk sparse_mla linear moe_dispatch; do
  a=$(find "$build" -name "libdsa_op_${lib}_cuda.a" | head -1)
  [ -n "$a" ] && echo "$lib SASS MMA: $(cuobjdump -sass "$a" 2>/dev/null | grep -oE '[A-Z]*MMA[.A-Z0-9]*' | sort | uniq -c | tr '\n' ' ')"
done | tee -a "$out/env.txt"

phase "gpu tests"
# The whole-model tests print their figures (replay statistics, divergences): run verbose, apart.
e2e='GraphReplay|EngineGraphs|TinyModelCuda|NarrowCheckpointCuda'
(cd "$build" && DSA_CHECKED=1 timeout "${GPU_TEST_SECONDS:-180}" ctest -L gpu -E "$e2e" --output-on-failure -j 4) >"$out/ctest_gpu.log" 2>&1
(cd "$build" && DSA_CHECKED=1 timeout "${GPU_TEST_SECONDS:-180}" ctest -L gpu -R "$e2e" -V -j 4) >"$out/ctest_e2e.log" 2>&1
grep -E "tests passed|tests failed|FAILED|Failed|No tests" "$out/ctest_gpu.log" "$out/ctest_e2e.log" | head -40

if [ "${SKIP_V32:-0}" != 1 ]; then
  phase "V3.2 shapes, random weights (5 layers)"
  # Full widths, FP8 linears generated on the device, every draft and verify run with a simulated
  # accept length (FP8 experts have no graph path yet, hence eager).
  v32=$(mktemp -d)
  python3 -c "import json,sys; c=json.load(open('testdata/deepseek-v3.2/config.json')); c['num_hidden_layers']=5; json.dump(c,open(sys.argv[1]+'/config.json','w'))" "$v32"
  timeout "${V32_SECONDS:-180}" "$build/dsa/cli/dsa" generate --model "$v32" --random-weights \
    --random-prompt-len 512 --num-prompts 4 --max-new-tokens 64 --ignore-eos --device cuda \
    --disable-cuda-graph --speculative-algorithm NEXTN --speculative-num-steps 3 \
    --simulate-accept-length 2.7 --json --progress >"$out/v32_random.log" 2>&1
  echo "v32 random weights rc=$?"
  grep -E "summary|SIMULATED|kv_cache|error" "$out/v32_random.log" | head -8
fi

phase "compute-sanitizer"
: >"$out/sanitizer.log"
san=/usr/local/cuda/bin/compute-sanitizer
[ -x "$san" ] || san=$(command -v compute-sanitizer)
# SAN_TESTS (regex on binary names) picks what runs under memcheck, SAN_RACE_TESTS under racecheck
# (default: the same); SKIP_SAN=1 runs none.
[ "${SKIP_SAN:-0}" = 1 ] && SAN_TESTS='^$' && SAN_RACE_TESTS='^$'
for tool in memcheck racecheck; do
  pick="${SAN_TESTS:-.}"
  [ "$tool" = racecheck ] && pick="${SAN_RACE_TESTS:-$pick}"
  for t in $(find "$build" -name '*_cuda_test' -type f -executable | sort | grep -E "$pick" || true); do
    echo "=== $tool $(basename "$t")" >>"$out/sanitizer.log"
    # Tests named *DuringCapture* provoke CUDA API errors on purpose (a sync inside a capture must
    # fail), which the sanitizer would count; racecheck skips the V3.2-shape cases (too slow).
    filter='-*DuringCapture*'
    [ "$tool" = racecheck ] && filter='-*DuringCapture*:*V32*:*V3_2*'
    DSA_GRAPH_FUZZ_ITERS="${SAN_FUZZ_ITERS:-20}" timeout "${SAN_SECONDS_EACH:-45}" "$san" \
      --tool "$tool" --error-exitcode 99 "$t" \
      --gtest_brief=1 --gtest_filter="$filter" >>"$out/sanitizer.log" 2>&1
    echo "rc=$? ($tool $(basename "$t"))" | tee -a "$out/sanitizer.log"
  done
done
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.log" | sort | uniq -c | head -20

phase "benchmarks"
: >"$out/bench.log"
[ "${SKIP_BENCH:-0}" = 1 ] && { phase "done (benchmarks skipped)"; exit 0; }
# BENCH_ONLY (regex on binary names) picks which kernel benchmarks run.
for b in $(find "$build/bench" -type f -executable 2>/dev/null | sort | grep -E "${BENCH_ONLY:-.}" || true); do
  echo "=== $(basename "$b")" >>"$out/bench.log"
  secs="${BENCH_SECONDS_EACH:-60}"
  # linear_bench sweeps the bf16 and FP8 V3.2 shapes and needs more than a minute (it printed
  # nothing under the 60 s cap on 2026-12-01).
  [ "$(basename "$b")" = linear_bench ] && secs="${LINEAR_BENCH_SECONDS:-240}"
  timeout "$secs" "$b" >>"$out/bench.log" 2>&1
  echo "rc=$?" >>"$out/bench.log"
done
cat "$out/bench.log" | head -120
if [ "${ENGINE_BENCH:-1}" = 1 ]; then
  phase "engine benchmark"
  timeout "${ENGINE_BENCH_SECONDS:-240}" scripts/bench_engine.sh "$build" >"$out/engine_bench.log" 2>&1
  cat "$out/engine_bench.log"
fi
phase "done"
