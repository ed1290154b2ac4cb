# Sourced by the scripts that run on the lent GPU machine (gpu_check.sh, bench_vs_peers.sh): the
# machine's description and the one CMake configuration they share.

# source_digest: 12 hex digits over the content of the sources (dsa, cmake, scripts, tests, tools,
# the top CMakeLists.txt). The device's copy of the tree has not always carried the checkout's .git
# (stop 43: its `git log` named an older commit), so a run is matched to a commit by running this
# here too: `bash -c '. scripts/gpu_build_env.sh; source_digest'`.
source_digest() {
  find dsa cmake scripts tests tools CMakeLists.txt -type f ! -name '*.pyc' -print0 |
    LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12
}

# gpu_env OUT_FILE: GPU, driver, nvcc, commit and source digest into OUT_FILE, echoed.
gpu_env() {
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -2
    git log -1 --format='commit %H %s (as the device copy of .git says: check the digest)' 2>/dev/null || true
    echo "sources $(source_digest)"
  } >"$1" 2>&1
  cat "$1"
}

# gpu_configure BUILD_DIR: /usr/bin/g++ as C++ and CUDA host compiler, Release. The GPU image has
# no libpcre2-dev; a copy unpacked here (carried as .deps, scripts/fetch_gpu_deps.sh) stands in.
gpu_configure() {
  local pcre=()
  pkg-config --exists libpcre2-8 2>/dev/null || pcre=(-DDSA_PCRE2_ROOT="$PWD/.deps/pcre2")
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=/usr/bin/g++ \
    -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ "${pcre[@]}"
}

# gpu_start NAME DEFAULT_OUT: the preamble of a GPU script: $out ($OUT or DEFAULT_OUT, created),
# $build (build-gpu), and phase MESSAGE, which prints "[NAME <seconds since start>s] MESSAGE".
gpu_start() {
  gpu_script_name=$1
  out="${OUT:-$2}"
  mkdir -p "$out"
  build=build-gpu
  gpu_t0=$(date +%s)
  phase() { echo "[$gpu_script_name $(($(date +%s) - gpu_t0))s] $*"; }
}
