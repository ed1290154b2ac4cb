#!/usr/bin/env bash
# Bad input to the dsa command line: every case must exit non-zero (not by a signal) with a
# one-line message naming the problem. Usage: cli_errors_test.sh DSA_BINARY REPO_ROOT
set -u
dsa="$1"
root="$2"
model="$root/models/tiny-dsa"
fail=0
long_prompt=$(printf 'word %.0s' $(seq 1 700))

expect_error() {  # expect_error "regex" args...
  local regex="$1"
  shift
  local out rc
  out=$("$dsa" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ]; then
    echo "FAIL (rc=$rc): dsa $*"
    fail=1
  elif ! echo "$out" | grep -Eq "$regex"; then
    echo "FAIL (message '$out' lacks /$regex/): dsa $*"
    fail=1
  elif [ "$(echo "$out" | wc -l)" -ne 1 ]; then
    echo "FAIL (not one line: '$out'): dsa $*"
    fail=1
  else
    echo "ok: $out"
  fi
}

expect_error "prompt is empty" generate --model "$model" --prompt ""
expect_error "longer than the context" generate --model "$model" --prompt "$long_prompt" --max-context 256
expect_error "max-new-tokens = 0" generate --model "$model" --prompt "Hi" --max-new-tokens 0
expect_error "max-new-tokens = -3" generate --model "$model" --prompt "Hi" --max-new-tokens -3
expect_error "speculative-num-draft-tokens = 8" generate --model "$model" --prompt "Hi" --speculative-num-draft-tokens 8
expect_error "speculative-num-draft-tokens = -1" generate --model "$model" --prompt "Hi" --speculative-num-draft-tokens -1
expect_error "no such model directory" generate --model "$root/does-not-exist" --prompt "Hi"
expect_error "temperature = -1" generate --model "$model" --prompt "Hi" --temperature -1
expect_error "cannot open" generate --model "$model" --prompts-file "$root/does-not-exist.txt"
expect_error "does not exist" perplexity --model "$root/does-not-exist" --file "$root/testdata/heldout.txt"
expect_error "cannot open" perplexity --model "$model" --file "$root/does-not-exist.txt"
expect_error "is a directory" perplexity --model "$model" --file "$root/testdata"
expect_error "window = 1: must be in \[2, 2048\]" perplexity --model "$model" --file "$root/testdata/heldout.txt" --window 1
expect_error "window = 4096: must be in \[2, 2048\]" perplexity --model "$model" --file "$root/testdata/heldout.txt" --window 4096
expect_error "max-windows = -1: must be >= 0" perplexity --model "$model" --file "$root/testdata/heldout.txt" --max-windows -1
# A GLM-5.2-style config (model_type glm_moe_dsa, rope_parameters, a "shared" layer in
# indexer_types): refused on every command that reads a model, naming the key and the layer.
glm=$(mktemp -d)
trap 'rm -rf "$glm"' EXIT
python3 - "$model/config.json" "$glm/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model_type"] = "glm_moe_dsa"
c["architectures"] = ["GlmMoeDsaForCausalLM"]
c["rope_parameters"] = dict(c.pop("rope_scaling"), rope_theta=c.pop("rope_theta"))
c["indexer_types"] = ["full", "shared", "full", "full"]
json.dump(c, open(sys.argv[2], "w"))
PY
expect_error 'indexer_types\[1\] = "shared": this layer reuses another layer.s top-k \(IndexShare' generate --model "$glm" --prompt "Hi"
expect_error 'indexer_types\[1\] = "shared".*not implemented' serve --model "$glm" --port 0
exit $fail
