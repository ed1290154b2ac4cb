#!/usr/bin/env bash
# The decode-equivalent DeepSeek-V3.2 model on one GPU (issue 16): V3.2's config with
# n_routed_experts = 8, n_group = topk_group = 1 and top-8 (every expert active, so at batch 1
# each layer reads exactly the bytes a real V3.2 layer reads), all 61 layers + the MTP layer, full
# widths, FP8 block-scaled weights generated on the device (--random-weights: no checkpoint).
# For each batch x context x d it runs `dsa generate --device cuda` with CUDA graphs on, random
# prompts of the context's length and, for d > 0, a simulated accept length (every draft and
# verify runs; the accepted count is drawn). Prints one row per run: a decode step's time (TPOT
# p50 x accept length), decode tokens/s (batch x accept length per step), the speed-up over d = 0
# at the same batch and context, the d = 0 roofline (weights + the step's cache reads at
# 4.28 TB/s) and its fraction, TPOT p50, TTFT (the prefill) and the run's wall seconds (load,
# graph capture, prefill and decode).
# Usage: scripts/bench_v32.sh BUILD_DIR [OUT_DIR]
#   BATCHES="1 8 32" CONTEXTS="4096 32768" DRAFTS="0 3" ACCEPT=3.0 NEW_TOKENS=64
#   RUN_SECONDS=300 (per run) SKIP="8:32768 32:32768" (batch:context pairs left out)
#   KV_DTYPE=fp8_e4m3 (the FP8-656 latent cache V3.2 is served with on Hopper; the roofline
#   counts its 656-byte rows)
#   HBM_TBS=4.28 (the roofline's bandwidth: the H200's measured copy rate; on an H100 pass its own)
#   EXTRA_FLAGS="--disable-fused-qkv-a" (more flags for every run, e.g. to measure a fusion off)
#   PROFILE=1 (--profile-device-time: a last column, the device's ms per decode step, which at
#   batch > 1 leaves out the prefill chunks that TPOT carries)
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: bench_v32.sh BUILD_DIR [OUT_DIR]}"
out="${2:-$(mktemp -d)}"
mkdir -p "$out"
dsa="$build/dsa/cli/dsa"
model="$out/v32-decode-equivalent"
mkdir -p "$model"
python3 - "$model/config.json" <<'PY'
import json, sys
c = json.load(open("testdata/deepseek-v3.2/config.json"))
c.update(n_routed_experts=8, n_group=1, topk_group=1, num_experts_per_tok=8)
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
results="$out/bench_v32.jsonl"
: >"$results"
for batch in ${BATCHES:-1 8 32}; do
  for ctx in ${CONTEXTS:-4096 32768}; do
    case " ${SKIP:-} " in *" $batch:$ctx "*) echo "skip batch $batch ctx $ctx (SKIP)"; continue ;; esac
    for d in ${DRAFTS:-0 3}; do
      flags=()
      [ "$d" -gt 0 ] && flags=(--speculative-algorithm NEXTN --speculative-num-steps "$d"
        --simulate-accept-length "${ACCEPT:-3.0}")
      log="$out/v32_b${batch}_c${ctx}_d${d}.log"
      new="${NEW_TOKENS:-64}"
      start=$(date +%s.%N)
      timeout "${RUN_SECONDS:-300}" "$dsa" generate --model "$model" --random-weights \
        --random-prompt-len "$ctx" --num-prompts "$batch" --max-new-tokens "$new" --ignore-eos \
        --device cuda --max-running-requests "$batch" --context-length $((ctx + new + 8)) \
        --kv-cache-dtype "${KV_DTYPE:-fp8_e4m3}" ${EXTRA_FLAGS:-} ${PROFILE:+--profile-device-time} \
        --json --progress "${flags[@]}" >"$log" 2>&1
      rc=$?
      wall=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
      summary=$(grep '"summary"' "$log" | tail -1)
      if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
        echo "batch $batch ctx $ctx d $d: FAILED rc=$rc after ${wall}s: $(grep -v '^{' "$log" | tail -3)"
        continue
      fi
      python3 - "$batch" "$ctx" "$d" "$wall" "$summary" >>"$results" <<'PY'
import json, sys
b, ctx, d, wall, s = sys.argv[1:6]
j = json.loads(s)["summary"]
j.update(batch=int(b), context=int(ctx), d=int(d), wall_s=float(wall))
print(json.dumps(j))
PY
      echo "batch $batch ctx $ctx d $d: done in ${wall}s"
    done
  done
done
python3 - "$results" "$model/config.json" "${HBM_TBS:-4.28}" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
c = json.load(open(sys.argv[2]))
hbm = float(sys.argv[3]) * 1e12
print(f"roofline bandwidth {sys.argv[3]} TB/s")
embed = c["vocab_size"] * c["hidden_size"] * 2  # bf16 embedding (one row read per token)
layers = c["num_hidden_layers"]
# Per-token cache reads per layer: the attended latents (top-k of 656 B FP8-656 rows) and every
# indexer key of the context (128 e4m3 + one fp32 scale).
def cache_bytes(ctx):
    return layers * (min(ctx, c["index_topk"]) * 656 + ctx * 132)
# A decode step's time: TPOT p50 x tokens per request-step (accept length), the step's wall time
# as a request sees it. The forwards of a step are launched back to back now (the device
# hand-off: only the step's last read waits), so the forward_kinds means are host launch times,
# not the forwards' GPU time. At batch 1 this is the decode step itself; at batch > 1 it also
# carries the other requests' prefill chunks that run beside the first decodes (an upper bound:
# use NEW_TOKENS large against the prompts there).
def step_fwd_ms(r):
    return r.get("tpot_ms_p50", 0.0) * r.get("accept_length_mean", 1.0)
def decode_tps(r):
    ms = step_fwd_ms(r)
    return r["batch"] * r.get("accept_length_mean", 1.0) * 1000.0 / ms if ms > 0 else 0.0
base = {(r["batch"], r["context"]): r for r in rows if r["d"] == 0}
print(f"{'batch':>5} {'ctx':>6} {'d':>2} {'step ms':>8} {'tok/s':>8} {'vs d0':>6} {'roof ms':>8} "
      f"{'of roof':>7} {'accept':>6} {'TPOT p50':>8} {'nodes':>6} {'TTFT s':>7} "
      f"{'wall s':>7} {'dev step':>8}")
for r in rows:
    b, ctx, d = r["batch"], r["context"], r["d"]
    fwd = step_fwd_ms(r)
    tps = decode_tps(r)
    w = r.get("kv_cache", {}).get("weight_bytes", 0)
    # d = 0 step: every weight but the MTP layer's (~1/62 of the layers' bytes) and all but one
    # embedding row per token (the LM head is read whole), plus the step's cache reads.
    layer_bytes = (w - 2 * embed) / (layers + 1)
    roof_ms = (w - embed - layer_bytes + b * cache_bytes(ctx)) / hbm * 1e3
    frac = f"{roof_ms / fwd:7.2f}" if d == 0 and fwd > 0 else "      -"
    ref = base.get((b, ctx))
    vs = f"{tps / decode_tps(ref):6.2f}" if d > 0 and ref and decode_tps(ref) > 0 else "     -"
    tpot = r.get("tpot_ms_p50", 0.0)
    print(f"{b:5d} {ctx:6d} {d:2d} {fwd:8.2f} {tps:8.1f} {vs} {roof_ms:8.2f} {frac} "
          f"{r.get('accept_length_mean', 1.0):6.2f} {tpot:8.2f} "
          f"{r.get('graph_nodes', 0):6d} {r.get('ttft_ms_p50', 0) / 1e3:7.2f} {r['wall_s']:7.1f} "
          f"{r.get('device_time', {}).get('step_ms', 0.0):8.3f}")
print(f"weights {rows[0].get('kv_cache', {}).get('weight_bytes', 0) / 1e9:.2f} GB" if rows else "no runs")
PY
