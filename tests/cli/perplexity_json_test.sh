#!/usr/bin/env bash
# `dsa perplexity --json`: one JSON object per window on stdout, then one summary object; the
# progress line (--progress, or stderr a terminal) only on stderr; the text output as before.
# JSON is checked with jq (scripts/setup.sh installs it). Usage: perplexity_json_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
model="$root/models/tiny-dsa"
file="$root/testdata/heldout.txt"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! command -v jq >/dev/null; then
  echo "FAIL: jq is not installed (scripts/setup.sh installs it)"
  exit 1
fi

check() {  # check "what" jq-filter file: the filter must print true
  if [ "$(jq -s "$2" "$3" 2>&1)" = "true" ]; then
    echo "ok: $1"
  else
    echo "FAIL: $1 (jq -s '$2' on:)"
    cat "$3"
    fail=1
  fi
}

# 1. --json --max-windows 2, progress forced: three JSON lines, progress on stderr.
"$dsa" perplexity --model "$model" --file "$file" --window 16 --max-windows 2 --json --progress \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL (rc=$rc): perplexity --json"; cat "$tmp/err"; exit 1; }
lines=$(wc -l <"$tmp/out")
[ "$lines" -eq 3 ] && echo "ok: 3 lines" || { echo "FAIL: $lines lines, want 3"; fail=1; }
n=0
while IFS= read -r line; do
  n=$((n + 1))
  if ! jq -e 'type == "object"' <<<"$line" >/dev/null 2>&1; then
    echo "FAIL: line $n is not one JSON object: $line"
    fail=1
  fi
done <"$tmp/out"
check "windows 0 and 1 in order, 16 tokens each" \
  '.[0].index == 0 and .[1].index == 1 and .[0].scored == 16 and .[1].scored == 16' "$tmp/out"
check "window figures present and in range" \
  '.[0:2] | all(.nll > 0 and .perplexity > 1 and .top1 >= 0 and .top1 <= 1
               and .mtp_top1 >= 0 and .mtp_top1 <= 1 and .mtp_agree >= 0 and .mtp_agree <= 1
               and .mtp_rows == 15)' "$tmp/out"
check "window perplexity is exp(nll / scored)" \
  '.[0:2] | all(((.nll / .scored | exp) / .perplexity - 1) | fabs < 1e-9)' "$tmp/out"
check "summary last: 2 windows, 32 scored, nll the windows' sum" \
  '.[2].summary.windows == 2 and .[2].summary.scored == 32
   and ((.[0].nll + .[1].nll - .[2].summary.nll) | fabs < 1e-9)' "$tmp/out"
if grep -q "2/2 windows" "$tmp/err"; then
  echo "ok: progress on stderr"
else
  echo "FAIL: no progress on stderr with --progress: '$(cat "$tmp/err")'"
  fail=1
fi

# 2. Without --progress and stderr not a terminal: nothing on stderr.
"$dsa" perplexity --model "$model" --file "$file" --window 16 --max-windows 1 --json \
  >"$tmp/out1" 2>"$tmp/err1"
rc=$?
if [ "$rc" -ne 0 ] || [ -s "$tmp/err1" ]; then
  echo "FAIL (rc=$rc): progress without a terminal or --progress: '$(cat "$tmp/err1")'"
  fail=1
else
  echo "ok: no progress into a file"
fi
check "one window then the summary" 'length == 2 and .[0].index == 0 and .[1].summary.windows == 1' \
  "$tmp/out1"

# 3. Text output as before (no JSON, no progress on stdout even with --progress).
"$dsa" perplexity --model "$model" --file "$file" --window 16 --max-windows 1 --progress \
  >"$tmp/text" 2>/dev/null
if [ "$(wc -l <"$tmp/text")" -eq 4 ] && grep -Eq '^model .* window 16$' "$tmp/text" &&
  grep -Eq '^tokens [0-9]+  scored 16  windows 1$' "$tmp/text" &&
  grep -Eq '^perplexity [0-9.]+  top-1 [0-9.]+  mtp top-1 [0-9.]+, agrees with the target [0-9.]+ \(15 rows\)$' "$tmp/text" &&
  grep -Eq '^[0-9.]+ s, [0-9]+ tokens/s$' "$tmp/text"; then
  echo "ok: text output"
else
  echo "FAIL: text output:"
  cat "$tmp/text"
  fail=1
fi
exit $fail
