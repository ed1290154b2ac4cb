#!/usr/bin/env bash
# Where the tiny model's TARGET_VERIFY spends its time beyond a DECODE's (issue 15: at batch 1 the
# verify takes ~30 us more than a decode at the same 156 nodes, RESULTS 2026-12-06): ncu times
# every kernel of `dsa generate --device cuda` on the README's prompt, eager (ncu times kernels,
# not graphs; each alone, caches not flushed, PDL's overlap not in the times), once at d = 0 and
# once at d = 3, and tools/ncu_forward_diff.py prints the last decode forward against the last
# verify forward kernel by kernel.
# Usage: scripts/profile_tiny_verify.sh BUILD_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: profile_tiny_verify.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: profile_tiny_verify.sh BUILD_DIR OUT_DIR}"
mkdir -p "$out"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
for d in 0 3; do
  flags=(--device cuda --disable-cuda-graph --max-new-tokens 8)
  [ "$d" -gt 0 ] && flags+=(--speculative-algorithm NEXTN --speculative-num-steps "$d")
  timeout "${RUN_SECONDS:-240}" "$ncu" --csv --log-file "$out/ncu_d$d.csv" --cache-control none \
    --clock-control none --metrics gpu__time_duration.sum \
    "$build/dsa/cli/dsa" generate --model models/tiny-dsa --prompt "And the king said unto" \
    "${flags[@]}" >"$out/generate_d$d.log" 2>&1
  echo "ncu d = $d rc=$?"
done
python3 tools/ncu_forward_diff.py "$out/ncu_d0.csv" "$out/ncu_d3.csv" 4 | tee "$out/verify_vs_decode.txt"
gzip -f "$out/ncu_d0.csv" "$out/ncu_d3.csv"
