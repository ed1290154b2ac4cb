#!/usr/bin/env bash
# Where a V3.2-shaped TARGET_VERIFY spends its time beyond a DECODE's (issue 15 / 16: at batch 1
# the decode-equivalent model's 4-row verify takes 1.22x a 1-row decode, bench/RESULTS.md
# 2026-12-06). ncu times every kernel of `dsa generate --random-weights` on V3.2's config cut to
# LAYERS layers of which DENSE are dense (8 routed experts top-8: the decode-equivalent expert
# bytes), eager (ncu times kernels, not graphs; each alone, caches not flushed, PDL's overlap not in
# the times), once at d = 0 and once at d = 3 with a simulated accept length, and
# tools/ncu_forward_diff.py prints the last decode forward against the last verify forward, kernel
# by kernel.
# Usage: scripts/profile_v32_verify.sh BUILD_DIR OUT_DIR   env: LAYERS=3 DENSE=1 PROMPT=2048
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build="${1:?usage: profile_v32_verify.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: profile_v32_verify.sh BUILD_DIR OUT_DIR}"
mkdir -p "$out/model"
layers="${LAYERS:-3}"
python3 - "$out/model/config.json" "$layers" "${DENSE:-1}" <<'PY'
import json, sys
c = json.load(open("testdata/deepseek-v3.2/config.json"))
c.update(n_routed_experts=8, n_group=1, topk_group=1, num_experts_per_tok=8,
         num_hidden_layers=int(sys.argv[2]), first_k_dense_replace=int(sys.argv[3]))
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
prompt="${PROMPT:-2048}"
for d in 0 3; do
  flags=(--max-new-tokens 8)
  [ "$d" -gt 0 ] && flags+=(--speculative-algorithm NEXTN --speculative-num-steps "$d"
    --simulate-accept-length 3.0)
  timeout "${RUN_SECONDS:-300}" "$ncu" --csv --log-file "$out/ncu_d$d.csv" --cache-control none \
    --clock-control none --metrics gpu__time_duration.sum \
    "$build/dsa/cli/dsa" generate --model "$out/model" --random-weights \
    --random-prompt-len "$prompt" --num-prompts 1 --ignore-eos --device cuda \
    --disable-cuda-graph --context-length $((prompt + 64)) --kv-cache-dtype fp8_e4m3 \
    "${flags[@]}" >"$out/generate_d$d.log" 2>&1
  echo "ncu d = $d rc=$?"
done
python3 tools/ncu_forward_diff.py "$out/ncu_d0.csv" "$out/ncu_d3.csv" "$layers" |
  tee "$out/verify_vs_decode.txt" | head -40
gzip -f "$out/ncu_d0.csv" "$out/ncu_d3.csv"
