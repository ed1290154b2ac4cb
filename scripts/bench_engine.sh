#!/usr/bin/env bash
# Decode throughput of the tiny model through `dsa generate --device cuda` (SPEC.md §5 graphs):
# batch 1, 8 and 32 concurrent requests, d = 0 and 3, CUDA graphs on (sampling on the device, then
# on the host: --sampling-on) and off, greedy, 128 new
# tokens per request, prompts cut from testdata/heldout.txt. Prints one table row per run: tokens/s
# (the whole run, its first prefill included), the decode rate (batch / TPOT: the steady state,
# without that prefill), ms per output token (per request, after its first token), mean accept
# length, and the host time
# per engine step spent staging and launching (what graphs remove) next to the step's total.
# With BREAKDOWN=1 each row is followed by where a step's host time goes (ms per step: the
# forwards' build / stage / launch / wait / collect / sample, the engine's schedule / accept /
# emit / retire, the rest; `generate --json`'s host_breakdown_ms_per_step) and the device-to-host
# reads per step. RUNS="on:device" (say) restricts the graph / sampling variants run;
# OVERLAP="on off" runs each also with --disable-overlap-schedule (default: on only);
# COMMIT="on off" each d > 0 run also with --disable-device-commit (default: on only). The commit
# column gives the steps committed on the device (d > 0), or off. PROFILE=1 runs with
# --profile-device-time and follows each row with the device's time per decode step: the step,
# its forwards (each kind's mean), the rest (acceptance, sampling, copies, GPU idle inside the
# step), step / forwards, and the device time between steps.
# Usage: [BREAKDOWN=1] [PROFILE=1] [BATCHES="1 8 32"] [DRAFTS="0 3"] [RUNS="on:device on:host off:device"]
#        [OVERLAP="on off"] [COMMIT="on off"] scripts/bench_engine.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: bench_engine.sh BUILD_DIR}"
dsa="$build/dsa/cli/dsa"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompts="$tmp/prompts.txt"
awk 'length($0) > 40 { print substr($0, 1, 120) }' testdata/heldout.txt | head -32 >"$prompts"
printf "%-6s %-3s %-7s %-8s %-7s %-7s %9s %10s %9s %8s %8s %10s %10s %7s %7s\n" batch d graphs \
  sampling overlap commit "tok/s" "decode t/s" "TPOT ms" accept steps "host ms/st" "fwd ms/st" \
  replays "nodes"
for batch in ${BATCHES:-1 8 32}; do
  head -"$batch" "$prompts" >"$tmp/batch.txt"
  for d in ${DRAFTS:-0 3}; do
    for run in ${RUNS:-on:device on:host off:device}; do
     for overlap in ${OVERLAP:-on}; do
     for commit in ${COMMIT:-on}; do
      [ "$d" -eq 0 ] && [ "$commit" = off ] && continue
      graphs=${run%%:*} where=${run##*:}
      flag=(--sampling-on "$where")
      [ "$overlap" = off ] && flag+=(--disable-overlap-schedule)
      [ "$commit" = off ] && flag+=(--disable-device-commit)
      [ "$graphs" = off ] && flag+=(--disable-cuda-graph)
      [ "${PROFILE:-0}" = 1 ] && flag+=(--profile-device-time)
      [ "$d" -gt 0 ] && flag+=(--speculative-algorithm NEXTN --speculative-num-steps "$d")
      json=$("$dsa" generate --model models/tiny-dsa --prompts-file "$tmp/batch.txt" \
        --max-new-tokens 128 --device cuda --json \
        --max-running-requests 32 --context-length 512 "${flag[@]}" 2>"$tmp/err.txt" | grep '"summary"')
      if [ -z "$json" ]; then
        echo "batch $batch d $d graphs $graphs sampling $where: FAILED: $(tail -2 "$tmp/err.txt")"
        continue
      fi
      BREAKDOWN="${BREAKDOWN:-0}" python3 - "$batch" "$d" "$graphs" "$where" "$json" "$overlap" "$commit" <<'PY'
import json, os, sys
b, d, g, w, j = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])["summary"]
# "on" asks for it; only d = 0 steps sampled on the device overlap (the count says how many did).
o = f"{sys.argv[6]}:{j.get('overlapped_decodes', 0)}" if sys.argv[6] == "on" else "off"
c = f"{j.get('device_commits', 0)}" if sys.argv[7] == "on" else "off"
nodes = j['graph_nodes'] / j['graphs'] if j.get('graphs') else 0
# decode t/s: the steady decode rate, batch requests at one output token per TPOT each; tok/s
# counts the whole run, its first (cold) prefill included.
dec = int(b) * 1000.0 / j['tpot_ms'] if j['tpot_ms'] > 0 else 0
print(f"{b:<6} {d:<3} {g:<7} {w:<8} {o:<7} {c:<7} {j['tokens_per_s']:9.1f} {dec:10.1f} {j['tpot_ms']:9.3f} "
      f"{j['accept_length_mean']:8.3f} {j['steps']:8d} {j['host_ms_per_step']:10.3f} "
      f"{j['forward_ms_per_step']:10.3f} {j['graph_replays']:7d} {nodes:7.0f}")
if os.environ.get("BREAKDOWN") == "1" and "host_breakdown_ms_per_step" in j:
    h = j["host_breakdown_ms_per_step"]
    parts = " ".join(f"{k} {h[k]:.4f}" for k in ("build", "stage", "launch", "wait", "collect",
                                                 "sample", "schedule", "accept", "emit",
                                                 "retire", "other"))
    print(f"    TTFT ms p50 {j.get('ttft_ms_p50', 0):.2f} | host ms/step: {parts} | step {h['step']:.4f}, host without wait "
          f"{h['host_without_wait']:.4f} | reads/step {j['readbacks_per_step']:.2f}, staged B/step {j.get('staged_bytes_per_step', 0):.0f}, "
          f"bytes/step {j['readback_bytes_per_step']:.0f}")
if "device_time" in j:
    t = j["device_time"]
    kinds = ", ".join(f"{k['model']} {k['mode']} {k['ms_each']:.4f} x{k['forwards']}" for k in t["kinds"])
    ratio = t["step_ms"] / t["forwards_ms_per_step"] if t["forwards_ms_per_step"] > 0 else 0
    print(f"    device ms/step: step {t['step_ms']:.4f} = forwards {t['forwards_ms_per_step']:.4f} + rest "
          f"{t['other_ms_per_step']:.4f} (step / forwards {ratio:.3f}); between steps {t['between_steps_ms']:.4f} | "
          f"per forward: {kinds}")
PY
     done
     done
    done
  done
done
