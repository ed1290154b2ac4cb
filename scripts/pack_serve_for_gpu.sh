#!/usr/bin/env bash
# Packs the dsa binary built here (with the server and the CUDA backend) for the lent GPU machine,
# whose image lacks cpp-httplib, prometheus-cpp and their libraries and has no network: copies the
# shared libraries `ldd` names, except the C/C++ runtime and the CUDA toolkit's and NCCL (present there),
# into build/serve-libs. Carry build/dsa/cli/dsa and build/serve-libs; run scripts/gpu_serve_bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/dsa/cli/dsa
[ -x "$bin" ] || { echo "pack_serve_for_gpu: build dsa first (scripts/build.sh)"; exit 2; }
rm -rf build/serve-libs && mkdir -p build/serve-libs
ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
  case "$name" in
    libc.so* | libm.so* | libstdc++* | libgcc_s* | librt.so* | libpthread* | libdl.so* | libcublas* | libnccl*) ;;
    *) cp -L "$path" build/serve-libs/ ;;
  esac
done
ls build/serve-libs
