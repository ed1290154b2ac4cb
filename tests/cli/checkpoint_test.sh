#!/usr/bin/env bash
# A narrow checkpoint in DeepSeek-V3.2's real layout (testdata/deepseek-v3.2/config.json with the
# widths and layer count cut, the layout kept: FP8 e4m3 linears with 128x128 weight_scale_inv, MoE,
# the MTP layer at index num_hidden_layers, several shards and model.safetensors.index.json),
# written by `dsa make-checkpoint`, then loaded and run by `dsa generate` and `dsa perplexity` on
# the CPU. vocab_size is cut to the tiny model's tokenizer (6144 ids), whose tokenizer.json is
# copied in (--tokenizer-from): the loader requires tokenizer size <= vocab_size. Then the
# corrupt-checkpoint cases: each must fail with exit 1 and a message naming the file and tensor.
# Usage: checkpoint_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/cli/v32_narrow_lib.sh
. "$root/tests/cli/v32_narrow_lib.sh"

ck="$tmp/v32"
if ! "$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$ck" \
  "${narrow[@]}" --shards 4 --seed 7 --tokenizer-from "$root/models/tiny-dsa" >"$tmp/make.out" 2>&1; then
  echo "FAIL: make-checkpoint"
  cat "$tmp/make.out"
  exit 1
fi
echo "ok: $(cat "$tmp/make.out")"

idx="$ck/model.safetensors.index.json"
expect "4 shards" '[ "$(ls "$ck"/model-0000?-of-000004.safetensors | wc -l)" -eq 4 ]'
expect "index names the FP8 scales" 'grep -q "q_a_proj.weight_scale_inv" "$idx"'
expect "index names the MTP layer 3" 'grep -q "model.layers.3.eh_proj.weight" "$idx"'
expect "index names the experts" 'grep -q "model.layers.1.mlp.experts.3.down_proj.weight" "$idx"'
expect "config keeps V3.2's quantization_config" 'grep -q "\"quant_method\": \"fp8\"" "$ck/config.json"'

# Loads and generates (plain and with MTP speculation); perplexity is finite.
if "$dsa" generate --model "$ck" --prompt "Hello world" --max-new-tokens 6 --ignore-eos --json \
  --progress >"$tmp/gen.out" 2>"$tmp/gen.err"; then
  expect "generate: 6 tokens" 'grep -q "\"completion_tokens\":6" "$tmp/gen.out"'
  expect "generate --progress: 4/4 files on stderr" 'grep -q "loading checkpoint: 4/4 files" "$tmp/gen.err"'
  expect "generate --progress: every tensor counted" \
    'grep -Eq "loading checkpoint: 4/4 files, ([0-9]+)/\1 tensors" "$tmp/gen.err"'
  expect "generate --progress: the load's throughput" \
    'grep -Eq "loaded checkpoint: [0-9]+ tensors, [0-9.]+ GB in [0-9.]+ s, [0-9.]+ GB/s" "$tmp/gen.err"'
else
  echo "FAIL: generate"
  cat "$tmp/gen.err"
  fail=1
fi
if "$dsa" generate --model "$ck" --prompt "Hello world" --max-new-tokens 6 --ignore-eos --json \
  --speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 1 \
  --speculative-num-draft-tokens 3 >"$tmp/mtp.out" 2>"$tmp/mtp.err"; then
  expect "generate with MTP equals plain greedy" \
    '[ "$(grep -o "\"token_ids\":\[[0-9,]*\]" "$tmp/mtp.out")" = "$(grep -o "\"token_ids\":\[[0-9,]*\]" "$tmp/gen.out")" ]'
else
  echo "FAIL: generate with MTP"
  cat "$tmp/mtp.err"
  fail=1
fi
if "$dsa" perplexity --model "$ck" --file "$root/testdata/heldout.txt" --window 16 --max-windows 1 \
  --json >"$tmp/ppl.out" 2>"$tmp/ppl.err"; then
  expect "perplexity finite" 'grep -Eq "\"perplexity\":[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?," "$tmp/ppl.out"'
else
  echo "FAIL: perplexity"
  cat "$tmp/ppl.err"
  fail=1
fi

# Corrupt copies: each must be refused with exit 1 and name the file and the tensor.
refused() {  # refused "what" dir pattern...
  local what="$1" dir="$2"
  shift 2
  "$dsa" generate --model "$dir" --prompt hi --max-new-tokens 1 >"$tmp/bad.out" 2>&1
  local rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "FAIL: $what: rc=$rc, want 1"
    cat "$tmp/bad.out"
    fail=1
    return
  fi
  for p in "$@"; do
    if ! grep -qF -- "$p" "$tmp/bad.out"; then
      echo "FAIL: $what: no '$p' in:"
      cat "$tmp/bad.out"
      fail=1
      return
    fi
  done
  echo "ok: $what: $(cat "$tmp/bad.out")"
}
copy() { rm -rf "$tmp/bad" && cp -r "$ck" "$tmp/bad"; }
# Rewrites the dtype of one tensor in a shard's header in place (same length: offsets stay valid).
set_dtype() {  # set_dtype FILE TENSOR OLD NEW
  python3 - "$@" <<'PY'
import re, struct, sys
path, name, old, new = sys.argv[1:5]
assert len(old) == len(new)
data = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', data[:8])[0]
header = data[8:8 + n].decode()
pat = re.compile('("' + re.escape(name) + '":\\{[^}]*"dtype":")' + re.escape(old) + '"')
header, count = pat.subn(lambda m: m.group(1) + new + '"', header)
assert count == 1, (path, name)
data[8:8 + n] = header.encode()
open(path, 'wb').write(data)
PY
}
# Renames a tensor in a shard's header (same length).
rename_tensor() {  # rename_tensor FILE OLD NEW
  python3 - "$@" <<'PY'
import struct, sys
path, old, new = sys.argv[1], ('"' + sys.argv[2] + '"').encode(), ('"' + sys.argv[3] + '"').encode()
assert len(old) == len(new)
data = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', data[:8])[0]
assert old in bytes(data[8:8 + n])
data[8:8 + n] = bytes(data[8:8 + n]).replace(old, new, 1)
open(path, 'wb').write(data)
PY
}
# Edits the index's weight_map: index_edit INDEX python-statement-on-m
index_edit() {
  python3 - "$@" <<'PY'
import json, sys
path, stmt = sys.argv[1], sys.argv[2]
j = json.load(open(path))
m = j["weight_map"]
exec(stmt)
json.dump(j, open(path, "w"), indent=2)
PY
}
shard_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weight_map"][sys.argv[2]])' "$idx" "$1"; }

copy
rm "$tmp/bad/model-00002-of-000004.safetensors"
refused "missing shard" "$tmp/bad" "model-00002-of-000004.safetensors" "cannot open" "for tensor"

copy
f="$tmp/bad/model-00003-of-000004.safetensors"
truncate -s $(($(stat -c %s "$f") - 1000)) "$f"
refused "truncated shard" "$tmp/bad" "model-00003-of-000004.safetensors" "data_offsets"

bias=model.layers.1.mlp.gate.e_score_correction_bias
s=$(shard_of "$bias")
copy
set_dtype "$tmp/bad/$s" "$bias" F32 I32
refused "dtype mismatch" "$tmp/bad" "$s" "$bias" "expected f32"

w=model.layers.2.self_attn.o_proj.weight
s=$(shard_of "${w}_scale_inv")
copy
rename_tensor "$tmp/bad/$s" "${w}_scale_inv" "${w}_scale_inX"
index_edit "$tmp/bad/model.safetensors.index.json" "m['${w}_scale_inX'] = m.pop('${w}_scale_inv')"
refused "missing weight_scale_inv" "$tmp/bad" "$(shard_of "$w")" "$w" "without ${w}_scale_inv"

copy
index_edit "$tmp/bad/model.safetensors.index.json" "del m['model.norm.weight']"
refused "tensor in a shard but not in the index" "$tmp/bad" "model.norm.weight" "not in the index"

copy
index_edit "$tmp/bad/model.safetensors.index.json" "m['model.norm.weightX'] = m['model.norm.weight']"
refused "tensor in the index but not in its shard" "$tmp/bad" "model.norm.weightX" "not found"

# Bad make-checkpoint arguments: clear errors, nothing left behind.
"$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$tmp/full" \
  >"$tmp/full.out" 2>&1
expect "the full V3.2 config is refused by --max-gb" \
  '[ $? -eq 1 ] && grep -q "more than --max-gb" "$tmp/full.out" && [ ! -e "$tmp/full" ]'
"$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$tmp/w" \
  "${narrow[@]}" --set hidden_size=100 >"$tmp/w.out" 2>&1
expect "a bad override names the field" '[ $? -eq 1 ] && grep -q "hidden_size = 100" "$tmp/w.out"'
"$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$ck" \
  "${narrow[@]}" >"$tmp/e.out" 2>&1
expect "a non-empty --out is refused" '[ $? -eq 1 ] && grep -q "not an empty directory" "$tmp/e.out"'

# A failed make-checkpoint leaves nothing behind.
"$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$tmp/many" \
  "${narrow[@]}" --shards 100000 >"$tmp/s.out" 2>&1
expect "--shards out of range" '[ $? -eq 1 ] && grep -q "shards = 100000" "$tmp/s.out"'
"$dsa" make-checkpoint --config "$root/testdata/deepseek-v3.2/config.json" --out "$tmp/many" \
  "${narrow[@]}" --shards 5000 >"$tmp/s.out" 2>&1
expect "more shards than weights" \
  '[ $? -eq 1 ] && grep -q "more than the" "$tmp/s.out" && [ ! -e "$tmp/many" ]'

[ "$fail" -eq 0 ] && echo "PASS" || echo "FAILED"
exit "$fail"
