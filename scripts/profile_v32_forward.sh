#!/usr/bin/env bash
# Per-kernel table of one decode forward of a V3.2-shaped model cut to a few layers (issue 16's
# "where does a layer's time go"): V3.2's config with LAYERS layers of which DENSE are dense (the
# rest MoE), 8 routed experts top-8 (the decode-equivalent model's expert bytes), full widths,
# FP8 weights generated on the device, FP8-656 cache, eager (ncu times kernels, not graphs), a
# PROMPT-token prompt and 4 new tokens. ncu times each kernel alone (`--cache-control none`:
# caches are not flushed, so a kernel finds in L2 what the previous one left, as in a forward;
# kernels are serialised, so PDL's overlap is not in these times).
# Usage: scripts/profile_v32_forward.sh BUILD_DIR OUT_DIR     env: LAYERS=3 DENSE=1 PROMPT=2048
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: profile_v32_forward.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: profile_v32_forward.sh BUILD_DIR OUT_DIR}"
mkdir -p "$out/model"
python3 - "$out/model/config.json" "${LAYERS:-3}" "${DENSE:-1}" <<'PY'
import json, sys
c = json.load(open("testdata/deepseek-v3.2/config.json"))
c.update(n_routed_experts=8, n_group=1, topk_group=1, num_experts_per_tok=8,
         num_hidden_layers=int(sys.argv[2]), first_k_dense_replace=int(sys.argv[3]))
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
prompt="${PROMPT:-2048}"
timeout "${RUN_SECONDS:-400}" "$ncu" --csv --log-file "$out/ncu.csv" --cache-control none \
  --clock-control none --metrics gpu__time_duration.sum \
  "$build/dsa/cli/dsa" generate --model "$out/model" --random-weights --random-prompt-len "$prompt" \
  --num-prompts 1 --max-new-tokens 4 --ignore-eos --device cuda --disable-cuda-graph \
  --context-length $((prompt + 64)) --kv-cache-dtype fp8_e4m3 >"$out/generate.log" 2>&1
echo "ncu rc=$?"
python3 tools/ncu_forward_table.py "$out/ncu.csv" -1 -v >"$out/last_decode_forward.txt" 2>&1
head -40 "$out/last_decode_forward.txt"
gzip -f "$out/ncu.csv"
