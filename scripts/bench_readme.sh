#!/usr/bin/env bash
# The README's main job on the GPU, d = 0 against d = 3 (issue 15's "done when": speculation
# faster than plain decoding at batch 1 on the README's prompt). Runs `dsa generate --device cuda`
# on that prompt REPEAT times each way, alternating d = 0 and d = 3 so drift hits both alike, with
# the device timeline on, and prints per run: tokens/s (whole run, first prefill included), TPOT
# (ms per output token after the first), TTFT, the mean accept length, and the device's ms per
# decode step; then the medians and the d3 / d0 ratios of tokens/s and of the decode rate
# (accept length / device step ms).
# Usage: [REPEAT=5] [MAX_NEW=64] [EXTRA_FLAGS=...] scripts/bench_readme.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: bench_readme.sh BUILD_DIR}"
dsa="$build/dsa/cli/dsa"
prompt="And the king said unto"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "${REPEAT:-5}"); do
  for d in 0 3; do
    flags=(--device cuda --json --profile-device-time --max-new-tokens "${MAX_NEW:-64}")
    [ "$d" -gt 0 ] && flags+=(--speculative-algorithm NEXTN --speculative-num-steps "$d")
    # shellcheck disable=SC2206  # EXTRA_FLAGS is a list of words
    flags+=(${EXTRA_FLAGS:-})
    if ! "$dsa" generate --model models/tiny-dsa --prompt "$prompt" "${flags[@]}" \
      2>"$tmp/err.txt" | grep '"summary"' >>"$tmp/d$d.jsonl"; then
      echo "d $d run $i: FAILED: $(tail -2 "$tmp/err.txt")"
    fi
  done
done
python3 - "$tmp" <<'PY'
import json, statistics, sys
runs = {d: [json.loads(l)["summary"] for l in open(f"{sys.argv[1]}/d{d}.jsonl")] for d in (0, 3)}
print(f"{'d':<3} {'tok/s':>8} {'TPOT ms':>8} {'TTFT ms':>8} {'accept':>7} {'dev step ms':>11}")
med = {}
for d, rs in runs.items():
    for j in rs:
        print(f"{d:<3} {j['tokens_per_s']:8.1f} {j['tpot_ms']:8.3f} {j['ttft_ms_p50']:8.2f} "
              f"{j['accept_length_mean']:7.3f} {j['device_time']['step_ms']:11.4f}")
    if rs:
        med[d] = {k: statistics.median(f(j) for j in rs) for k, f in {
            "tok_s": lambda j: j["tokens_per_s"], "tpot": lambda j: j["tpot_ms"],
            "rate": lambda j: j["accept_length_mean"] / j["device_time"]["step_ms"]}.items()}
        print(f"d {d} median: tok/s {med[d]['tok_s']:.1f}, TPOT {med[d]['tpot']:.3f} ms, "
              f"tokens per device ms {med[d]['rate']:.3f}")
if 0 in med and 3 in med:
    print(f"d3 / d0: tok/s {med[3]['tok_s'] / med[0]['tok_s']:.3f}x, TPOT "
          f"{med[0]['tpot'] / med[3]['tpot']:.3f}x, decode rate per device step "
          f"{med[3]['rate'] / med[0]['rate']:.3f}x")
PY
