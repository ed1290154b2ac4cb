# Sourced by the CLI tests (after setting `fail`): `expect "what" condition` prints ok/FAIL and
# sets fail=1 when the condition (evaluated) is false.
expect() { # expect "what" condition
  if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

# refused "regex" args...: `$dsa generate --model $model args` (the caller's variables) exits 1 (2:
# a CLI11 parse error) with one stderr line matching regex; prints ok/FAIL, sets fail=1 on FAIL.
refused() {
  local regex="$1" out rc
  shift
  out=$(timeout 60 "$dsa" generate --model "$model" "$@" 2>&1 >/dev/null)
  rc=$?
  if { [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ]; } && grep -Eq -- "$regex" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ]; then
    echo "ok: refused: $out"
  else
    echo "FAIL: wanted rc 1 or 2 and one line matching /$regex/, got rc $rc '$out': $*"
    fail=1
  fi
}

# tokens FILE: "index token_ids" per request of `generate --json` output, in prompt order (the
# JSON keys are sorted: index before ids).
tokens() { sed -n 's/^{.*"index":\([0-9]*\),.*"token_ids":\(\[[0-9,]*\]\).*/\1 \2/p' "$1" | sort -n; }
