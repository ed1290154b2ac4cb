#!/usr/bin/env bash
# Configures and builds dsa into ${DSA_BUILD_DIR:-build} with every core. The CUDA backend is built
# when nvcc is found (sm_90a); otherwise the build is host-only. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${DSA_BUILD_DIR:-build}"
scripts/setup.sh
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${DSA_BUILD_TYPE:-Release}" "$@" >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)"
