# Sourced by the CLI tests (after setting `fail`): `expect "what" condition` prints ok/FAIL and
# sets fail=1 when the condition (evaluated) is false.
expect() { # expect "what" condition
  if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
