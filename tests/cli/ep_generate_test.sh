#!/usr/bin/env bash
# `dsa generate --dp-size N --ep-size N` on the CPU (issue 18 item 3): the N data-parallel ranks
# split the tiny model's 4 routed experts (model/expert_parallel.h). The design is exact, so greedy
# tokens per prompt at --dp 2 --ep 2 (five prompts) and --dp 4 --ep 4 (two prompts: two ranks
# idle the whole run) equal --dp 1's, d = 0 and d = 3. The refusals name the flag: --ep not
# dividing the experts, --ep other than --dp, --ep without --dp.
# Usage: ep_generate_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
model="$root/models/tiny-dsa"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/cli/expect_lib.sh
. "$root/tests/cli/expect_lib.sh"

head -n 5 "$root/testdata/heldout.txt" >"$tmp/five"
head -n 2 "$root/testdata/heldout.txt" >"$tmp/two"
gen() {  # gen out prompts dp ep d
  local spec=()
  [ "$5" -gt 0 ] && spec=(--speculative-algorithm NEXTN --speculative-num-steps "$5")
  timeout 120 "$dsa" generate --model "$model" --prompts-file "$2" --max-new-tokens 8 --json \
    --dp "$3" --ep "$4" "${spec[@]}" >"$1" 2>"$1.err" || {
    echo "FAIL: generate dp $3 ep $4 d $5"
    cat "$1.err"
    fail=1
  }
}
for d in 0 3; do
  for run in "five 2" "two 4"; do
    set -- $run
    set_="$1" prompts="$tmp/$1" n=$(wc -l <"$tmp/$1") ep="$2"
    gen "$tmp/one.$set_.$d" "$prompts" 1 1 "$d"
    gen "$tmp/ep.$set_.$d" "$prompts" "$ep" "$ep" "$d"
    want=$(tokens "$tmp/one.$set_.$d") got=$(tokens "$tmp/ep.$set_.$d")
    expect "d $d, $n prompts: --dp $ep --ep $ep gives --dp 1's tokens per prompt" \
      '[ "$(wc -l <<<"$want")" -eq "$n" ] && [ "$got" = "$want" ]'
    expect "d $d, --ep $ep: the split is printed" \
      'grep -q "ep-size $ep: each rank computes $((4 / ep)) of the 4 routed experts" "$tmp/ep.$set_.$d.err"'
  done
done
expect "--expert-parallel-size is the same flag" \
  'timeout 60 "$dsa" generate --model "$model" --prompt Hi --max-new-tokens 2 --dp 2 --expert-parallel-size 2 --json 2>/dev/null | grep -q "\"world_size\":2"'

refused "--ep-size = 3: must divide the model's 4 routed experts" --prompt Hi --dp 3 --ep 3
refused "--ep-size = 2 with --dp-size = 4: .*must be 1 or the --dp-size" --prompt Hi --dp 4 --ep 2
refused "--ep-size = 2 needs --dp-size 2" --prompt Hi --ep 2
refused "--ep-size = 0: must be in \[1, 64\]" --prompt Hi --ep 0
exit $fail
