#!/usr/bin/env bash
# `dsa generate --dp-size N` on the CPU (issue 18): N data-parallel ranks in one process
# (engine/dp_engine_group.h). Greedy, d = 0 and d = 3: every prompt's tokens at --dp 2 (five
# prompts) and --dp 3 (two prompts: a rank idles the whole run) equal --dp 1's; the JSON summary
# reports the world size, steps equal on every rank and every request placed once; the memory of
# the model copies is printed. Bad values fail with one line naming the flag.
# Usage: dp_generate_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
model="$root/models/tiny-dsa"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/cli/expect_lib.sh
. "$root/tests/cli/expect_lib.sh"
summary_dp() { grep -o '"dp":{[^}]*}' "$1"; }
array() { grep -o "\"$2\":\[[0-9,]*\]" <<<"$1" | sed 's/.*\[\(.*\)\]/\1/'; }

head -n 5 "$root/testdata/heldout.txt" >"$tmp/five"
head -n 2 "$root/testdata/heldout.txt" >"$tmp/two"
gen() {  # gen out prompts dp d
  local spec=()
  [ "$4" -gt 0 ] && spec=(--speculative-algorithm NEXTN --speculative-num-steps "$4")
  timeout 120 "$dsa" generate --model "$model" --prompts-file "$2" --max-new-tokens 8 --json \
    --dp "$3" "${spec[@]}" >"$1" 2>"$1.err" || { echo "FAIL: generate dp $3 d $4"; cat "$1.err"; fail=1; }
}
for d in 0 3; do
  for run in "five 2" "two 3"; do
    set -- $run
    set_="$1" prompts="$tmp/$1" dp="$2" n=$(wc -l <"$tmp/$1")
    gen "$tmp/one.$set_.$d" "$prompts" 1 "$d"
    gen "$tmp/dp.$set_.$d" "$prompts" "$dp" "$d"
    want=$(tokens "$tmp/one.$set_.$d") got=$(tokens "$tmp/dp.$set_.$d")
    expect "d $d, $n prompts: --dp $dp gives --dp 1's tokens per prompt" \
      '[ "$(wc -l <<<"$want")" -eq "$n" ] && [ "$got" = "$want" ]'
    s=$(summary_dp "$tmp/dp.$set_.$d")
    steps=$(array "$s" steps_per_rank) reqs=$(array "$s" requests_per_rank)
    expect "d $d, --dp $dp: world size in the summary" 'grep -q "\"world_size\":$dp" <<<"$s"'
    expect "d $d, --dp $dp: steps equal on every rank ($steps)" \
      '[ "$(tr , "\n" <<<"$steps" | wc -l)" -eq "$dp" ] && [ "$(tr , "\n" <<<"$steps" | sort -u | wc -l)" -eq 1 ] && [ "${steps%%,*}" -gt 0 ]'
    expect "d $d, --dp $dp: every request placed once ($reqs)" \
      '[ "$(tr , "\n" <<<"$reqs" | wc -l)" -eq "$dp" ] && [ "$(tr , "\n" <<<"$reqs" | awk "{s+=\$1} END {print s}")" -eq "$n" ]'
    [ "$dp" -gt "$n" ] && expect "d $d: $dp ranks for $n prompts leave a rank idle" \
      'tr , "\n" <<<"$reqs" | grep -qx 0'
    s1=$(summary_dp "$tmp/one.$set_.$d")
    expect "d $d, --dp 1: world size 1 in the summary" 'grep -q "\"world_size\":1" <<<"$s1"'
    expect "d $d, --dp $dp: the model copies' memory printed" \
      'grep -Eq "dp-size $dp: $dp model instances .* = [0-9.]+ (MiB|GiB)" "$tmp/dp.$set_.$d.err"'
  done
done
# Text output: every request, and the per-rank line.
timeout 120 "$dsa" generate --model "$model" --prompts-file "$tmp/five" --max-new-tokens 4 \
  --dp-size 2 >"$tmp/text" 2>/dev/null
expect "text output: 5 requests and the dp line" \
  '[ "$(grep -c "^--- request" "$tmp/text")" -eq 5 ] && grep -Eq "^\[dp 2 ranks: steps per rank ([0-9]+) \1; requests per rank" "$tmp/text"'
expect "--data-parallel-size is the same flag" \
  'timeout 60 "$dsa" generate --model "$model" --prompt Hi --max-new-tokens 2 --data-parallel-size 2 --json 2>/dev/null | grep -q "\"world_size\":2"'

refused "--dp-size = 0: must be in \[1, 64\]" --prompt Hi --dp 0
refused "--dp-size = 65: must be in \[1, 64\]" --prompt Hi --dp 65
refused "--dp-size = -1: must be in \[1, 64\]" --prompt Hi --dp-size -1
refused "dp.*abc is not an integer" --prompt Hi --dp abc
# --device cuda with --dp 2 runs one process per GPU (dp_processes_test.sh): without a device the
# launcher refuses before starting any, with the backend's own line. (With a device it would start
# the ranks: not a cpu test.)
if ! nvidia-smi -L >/dev/null 2>&1; then
  refused "cuda backend: (built, but no CUDA device|not built)" --prompt Hi --dp 2 --device cuda
fi
exit $fail
