#!/usr/bin/env bash
# The one script run on the lent H200 (see docs/architecture.md, "GPU runs"): configure with the
# system g++ as C++ and CUDA host compiler, build with every core, run the gpu-labelled tests, then
# the benchmarks. Logs go to $OUT (or ./gpu-out when $OUT is unset).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
build=build-gpu
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvcc --version | tail -1
  git rev-parse HEAD 2>/dev/null || true
} >"$out/env.txt" 2>&1

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=/usr/bin/g++ \
  -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" -A3 "$out/build.log" | head -60; exit 1; }
echo "build ok"

(cd "$build" && ctest -L gpu --output-on-failure -j 1) >"$out/ctest_gpu.log" 2>&1
echo "gpu ctest: $(grep -E 'tests passed|No tests were found' "$out/ctest_gpu.log")"
(cd "$build" && ctest -LE gpu -j "$(nproc)") >"$out/ctest_cpu.log" 2>&1
echo "cpu ctest: $(grep -E 'tests passed' "$out/ctest_cpu.log")"
"$build/dsa/cli/dsa" check --device cuda >"$out/check_cuda.log" 2>&1
echo "dsa check --device cuda: rc=$? $(tail -1 "$out/check_cuda.log")"

for b in "$build"/bench/*_bench "$build"/dsa/kernels/*/*_bench; do
  [ -x "$b" ] || continue
  "$b" --benchmark_min_time=0.2 >"$out/$(basename "$b").log" 2>&1
  echo "bench $(basename "$b"): rc=$?"
done
