#!/usr/bin/env bash
# The device's kernel-by-kernel timeline of the tiny model's decode step, d = 0 against d = 3, on
# the README's prompt (issue 15: why the speculative step costs what it does). Builds the CUPTI
# injection library tools/kernel_trace/kernel_trace.cc, runs `dsa generate --device cuda` under
# it (graphs on, as the README runs), and summarises each trace with tools/kernel_timeline.py:
# per record of the steady step its offset, duration and the idle gap before it.
# Usage: [DRAFTS="0 3"] [MAX_NEW=64] [EXTRA_FLAGS=...] scripts/trace_step.sh BUILD_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: trace_step.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: trace_step.sh BUILD_DIR OUT_DIR}"
mkdir -p "$out"
inc=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda*/ -name cupti.h 2>/dev/null | head -1)")
lib=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib /usr/local/lib -name 'libcupti.so*' 2>/dev/null | head -1)")
if [ -z "$inc" ] || [ -z "$lib" ]; then
  echo "trace_step: no CUPTI here (cupti.h: '$inc', libcupti: '$lib')"
  exit 2
fi
so="$out/libkernel_trace.so"
/usr/bin/g++ -std=c++20 -O2 -shared -fPIC -I"$inc" tools/kernel_trace/kernel_trace.cc \
  -L"$lib" -lcupti -Wl,-rpath,"$lib" -o "$so" || exit 1
for d in ${DRAFTS:-0 3}; do
  flags=(--device cuda --json --max-new-tokens "${MAX_NEW:-64}")
  [ "$d" -gt 0 ] && flags+=(--speculative-algorithm NEXTN --speculative-num-steps "$d")
  # shellcheck disable=SC2206  # EXTRA_FLAGS is a list of words
  flags+=(${EXTRA_FLAGS:-})
  CUDA_INJECTION64_PATH="$(realpath "$so")" KERNEL_TRACE_OUT="$out/trace_d$d.csv" \
    "$build/dsa/cli/dsa" generate --model models/tiny-dsa --prompt "And the king said unto" \
    "${flags[@]}" >"$out/generate_d$d.json" 2>"$out/generate_d$d.err"
  echo "d $d: rc=$? $(grep -o '"accept_length_mean":[0-9.]*' "$out/generate_d$d.json") \
$(wc -l <"$out/trace_d$d.csv") records"
  python3 tools/kernel_timeline.py "$out/trace_d$d.csv" >"$out/timeline_d$d.txt" 2>&1
  head -2 "$out/timeline_d$d.txt"
done
