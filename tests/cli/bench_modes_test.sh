#!/usr/bin/env bash
# The benchmark modes of `dsa generate` on the CPU (issue 16 items 5-7):
# --random-weights builds a narrow V3.2-shaped model (testdata/deepseek-v3.2/config.json narrowed
# as checkpoint_test.sh narrows it) from config.json alone: the requested tokens, all in the
# vocabulary (a NaN forward would emit none), the same for the same seed, other tokens for another
# seed, and exactly what the make-checkpoint checkpoint of that seed gives (the host generator is
# make-checkpoint's). --simulate-accept-length is refused without speculation or out of range and
# reported as SIMULATED. The full V3.2 config is refused before any weight is made, with the
# numbers; the chosen cache capacity is printed.
# Usage: bench_modes_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/cli/v32_narrow_lib.sh
. "$root/tests/cli/v32_narrow_lib.sh"
refused() {  # refused "regex" args...: exit 1 with one line on stderr matching regex
  local regex="$1" out rc
  shift
  out=$(timeout 60 "$dsa" generate "$@" 2>&1 >/dev/null | grep -v '^dsa generate: random weights')
  rc=${PIPESTATUS[0]}
  if grep -Eq -- "$regex" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ]; then
    echo "ok: refused: $out"
  else
    echo "FAIL: wanted one line matching /$regex/, got '$out': $*"
    fail=1
  fi
}
ids() { grep -o '"token_ids":\[[0-9,]*\]' "$1"; }

ck="$tmp/ck"
"$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$ck" \
  "${narrow[@]}" --seed 7 --tokenizer-from "$root/models/tiny-dsa" >/dev/null ||
  { echo "FAIL: make-checkpoint"; exit 1; }
cfg="$tmp/cfg"  # config.json alone
mkdir "$cfg" && cp "$ck/config.json" "$cfg/"

gen() {  # gen out args...
  local out="$1"
  shift
  timeout 120 "$dsa" generate --max-new-tokens 9 --ignore-eos --json --random-prompt-len 24 \
    --num-prompts 2 "$@" >"$out" 2>"$out.err"
}
if gen "$tmp/a" --model "$cfg" --random-weights --random-weights-seed 7; then
  expect "random weights: 9 tokens per request" '[ "$(grep -c "\"completion_tokens\":9," "$tmp/a")" -eq 2 ]'
  expect "random weights: ids in the vocabulary" \
    '! ids "$tmp/a" | grep -o "[0-9]\+" | awk "\$1 >= 6144 {bad=1} END {exit !bad}"'
  expect "random weights said loudly" 'grep -q "random weights" "$tmp/a.err" && grep -q "\"random_weights\":true" "$tmp/a"'
  expect "cache capacity in the JSON summary" 'grep -Eq "\"kv_cache\":\{\"available_bytes\":[1-9][0-9]*,\"budget_bytes\":[1-9]" "$tmp/a"'
else
  echo "FAIL: generate --random-weights"
  cat "$tmp/a.err"
  fail=1
fi
gen "$tmp/b" --model "$cfg" --random-weights --random-weights-seed 7 --progress
expect "cache capacity printed at load with --progress" \
  'grep -Eq "KV cache: [0-9]+ pages .* tokens, .* whole-context requests .* available" "$tmp/b.err"'
expect "same seed, same tokens" '[ -n "$(ids "$tmp/a")" ] && [ "$(ids "$tmp/a")" = "$(ids "$tmp/b")" ]'
gen "$tmp/c" --model "$cfg" --random-weights --random-weights-seed 8
expect "another seed, other tokens" '[ "$(ids "$tmp/a")" != "$(ids "$tmp/c")" ]'
gen "$tmp/d" --model "$ck"
expect "equals the make-checkpoint checkpoint of that seed" '[ "$(ids "$tmp/a")" = "$(ids "$tmp/d")" ]'

# Simulated acceptance on random weights: every draft and verify runs; reported as SIMULATED.
if gen "$tmp/s" --model "$cfg" --random-weights --speculative-algorithm NEXTN \
  --speculative-num-steps 3 --simulate-accept-length 3.5; then
  expect "simulated: 9 tokens" '[ "$(grep -c "\"completion_tokens\":9," "$tmp/s")" -eq 2 ]'
  expect "simulated: JSON says so" 'grep -q "\"accept_length_simulated\":3.5" "$tmp/s" && grep -q "accept length SIMULATED: 3.5" "$tmp/s"'
  expect "simulated: stderr says so" 'grep -q "accept length SIMULATED: 3.5" "$tmp/s.err"'
  expect "simulated: accept lengths 3 and 4 only" 'grep -q "\"accept_histogram\":\[0,0,[0-9]*,[0-9]*\]" "$tmp/s"'
else
  echo "FAIL: generate --simulate-accept-length"
  cat "$tmp/s.err"
  fail=1
fi
timeout 60 "$dsa" generate --model "$root/models/tiny-dsa" --prompt "Once" --max-new-tokens 12 \
  --ignore-eos --speculative-algorithm NEXTN --simulate-accept-length 2 >"$tmp/t" 2>&1
expect "simulated: text summary says so" 'grep -q "accept length SIMULATED: 2" "$tmp/t" && grep -q "mean accept length 2.000 (SIMULATED: 2)" "$tmp/t"'
expect "text summary: the cache capacity" 'grep -q "^\[KV cache: [0-9]* pages" "$tmp/t"'

m=(--model "$cfg" --random-weights --random-prompt-len 4)
refused "simulate-accept-length = 2 needs --speculative-algorithm" "${m[@]}" --simulate-accept-length 2
refused "simulate-accept-length = 4.5: must be in \[1, 4\]" "${m[@]}" --speculative-algorithm NEXTN --simulate-accept-length 4.5
refused "simulate-accept-length = 0.5: must be in \[1, 3\]" "${m[@]}" --speculative-algorithm NEXTN --speculative-num-steps 2 --simulate-accept-length 0.5
refused "simulate-accept-length = nan" "${m[@]}" --speculative-algorithm NEXTN --simulate-accept-length nan
refused "no tokenizer.json.*--random-prompt-len" --model "$cfg" --random-weights --prompt hi
refused "random-prompt-len = 0" --model "$cfg" --random-weights --random-prompt-len 0
refused "num-prompts = 3 needs --random-prompt-len" --model "$ck" --prompt hi --num-prompts 3
refused "random-weights-seed = -1" "${m[@]}" --random-weights-seed -1
# The full V3.2 config (FP8, 61 layers, 256 experts: ~640 GiB) cannot fit in this machine's memory:
# refused before any weight is generated, naming the weight, needed and available bytes.
full="$tmp/full"
mkdir "$full" && cp "$root/testdata/deepseek-v3.2/config.json" "$full/"
refused "ResourceExhausted: memory: the weights \([0-9]+ bytes.*need [0-9]+ bytes.*than the [0-9]+ bytes .* available" \
  --model "$full" --random-weights --random-prompt-len 4

exit $fail
