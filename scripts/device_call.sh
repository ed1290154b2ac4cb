# Sourced by a stop's device-call scripts (docs/gpu-runs/*/scripts/call*.sh): the preamble every
# one of them repeated.
#   call_begin NAME   W=/tmp/NAME (created); the machine's description into W/env.txt (echoed);
#                     build-gpu configured (a warm machine keeps it between calls)
#   el                seconds since call_begin
#   bundle            W as $OUT/NAME.tgz: run after each phase, so a cut call still returns what
#                     finished (at most 8 files come back from $OUT)
#   call_build T...   the targets (all if none) with every core; on failure the errors, a bundle
#                     and exit 1
call_begin() {
  call_name=$1
  call_t0=$(date +%s)
  W=/tmp/$call_name
  mkdir -p "$W"
  . scripts/gpu_build_env.sh
  gpu_env "$W/env.txt" | head -3
  [ -f build-gpu/build.ninja ] || gpu_configure build-gpu >"$W/cfg.log" 2>&1
}
el() { echo $(($(date +%s) - call_t0)); }
bundle() { tar czf "$OUT/$call_name.tgz" -C /tmp "$call_name"; }
call_build() {
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  if ! cmake --build build-gpu -j "$(nproc)" "${targets[@]}" >"$W/build.log" 2>&1; then
    echo "BUILD FAILED"
    grep -E "error|FAILED" -A3 "$W/build.log" | head -30
    bundle
    exit 1
  fi
  echo "build $(el) s, warnings $(grep -c warning "$W/build.log")"
}
