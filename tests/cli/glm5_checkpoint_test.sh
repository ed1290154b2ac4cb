#!/usr/bin/env bash
# GLM-5 end to end on the CPU: testdata/glm-5/config.json (zai-org/GLM-5's config.json: model_type
# glm_moe_dsa, rope_parameters with plain RoPE, no bos_token_id, an eos_token_id list, 32 index
# heads with interleaved indexer RoPE, qk_nope_head_dim 192 and v_head_dim 256 above V3.2's 128)
# narrowed by `dsa make-checkpoint` (hidden size, layers, experts, MLA heads and vocab cut; the
# head widths, the index heads and the key spellings kept, plus transformers' mlp_layer_types and
# an all-"full" indexer_types), loaded and run by `dsa generate`, in bf16 (zai-org/GLM-5) and
# with --fp8 (GLM-5-FP8's layout): greedy with d = 3 MTP speculation must give the tokens of
# d = 0 (lossless), and a request stops on any id of the eos list. Usage: glm5_checkpoint_test.sh DSA ROOT
set -u
dsa="$1"
root="$2"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/cli/expect_lib.sh
. "$root/tests/cli/expect_lib.sh"

# vocab_size is the tiny tokenizer's (6144 ids); its EOS (id 1) heads the eos list, as GLM-5's
# <|endoftext|> heads its own.
narrow=(--num-hidden-layers 3 --n-routed-experts 4 --hidden-size 256
  --set num_attention_heads=16 --set num_key_value_heads=16 --set num_experts_per_tok=2
  --set q_lora_rank=128 --set intermediate_size=512 --set moe_intermediate_size=128
  --set vocab_size=6144 --set index_topk=128 --set 'eos_token_id=[1,2,3]' --set pad_token_id=1
  --set first_k_dense_replace=1 --set 'mlp_layer_types=["dense","sparse","sparse"]'
  --set 'indexer_types=["full","full","full"]')
ck="$tmp/glm5"
if ! "$dsa" make-checkpoint --config "$root/testdata/glm-5/config.json" --out "$ck" \
  "${narrow[@]}" --shards 2 --seed 11 --tokenizer-from "$root/models/tiny-dsa" >"$tmp/make.out" 2>&1; then
  echo "FAIL: make-checkpoint"
  cat "$tmp/make.out"
  exit 1
fi
echo "ok: $(cat "$tmp/make.out")"
idx="$ck/model.safetensors.index.json"
expect "config keeps model_type glm_moe_dsa" 'grep -q "\"model_type\": \"glm_moe_dsa\"" "$ck/config.json"'
expect "config keeps rope_parameters" 'grep -q "\"rope_parameters\"" "$ck/config.json"'
expect "index names the MTP layer 3" 'grep -q "model.layers.3.eh_proj.weight" "$idx"'
expect "index names the indexer" 'grep -q "model.layers.0.self_attn.indexer.wq_b.weight" "$idx"'
expect "index names the experts" 'grep -q "model.layers.1.mlp.experts.3.down_proj.weight" "$idx"'

printf 'Hello world\nThe capital of France is\n' >"$tmp/prompts.txt"
gen() {  # gen OUT ARGS...: greedy, 8 tokens, JSON, from $model_dir (default $ck)
  local out="$1"
  shift
  "$dsa" generate --model "${model_dir:-$ck}" --prompts-file "$tmp/prompts.txt" --max-new-tokens 8 --json "$@" \
    >"$out" 2>"$out.err"
}
# The token ids of request I (lines come in finish order), or of both requests in index order.
ids_of() { grep "\"index\":$2," "$1" | grep -o "\"token_ids\":\[[0-9,]*\]"; }
ids() { ids_of "$1" 0 && ids_of "$1" 1; }

if gen "$tmp/d0.out" --ignore-eos; then
  expect "d = 0: 8 tokens each" '[ "$(grep -c "\"completion_tokens\":8" "$tmp/d0.out")" -eq 2 ]'
else
  echo "FAIL: generate d = 0"
  cat "$tmp/d0.out.err"
  fail=1
fi
if gen "$tmp/d3.out" --ignore-eos --speculative-algorithm EAGLE --speculative-num-steps 3 \
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4; then
  expect "d = 0 and d = 3 both gave two requests' tokens" \
    '[ "$(ids "$tmp/d0.out" | wc -l)" -eq 2 ] && [ "$(ids "$tmp/d3.out" | wc -l)" -eq 2 ]'
  expect "d = 3 greedy tokens equal d = 0's (lossless)" '[ "$(ids "$tmp/d3.out")" = "$(ids "$tmp/d0.out")" ]'
  expect "d = 3 accepted drafts were measured" 'grep -q "\"accept_length_mean\"" "$tmp/d3.out"'
else
  echo "FAIL: generate d = 3"
  cat "$tmp/d3.out.err"
  fail=1
fi

# GLM-5-FP8's layout (V3.2's block-scaled e4m3 quantization_config, --fp8): lossless too.
if "$dsa" make-checkpoint --config "$root/testdata/glm-5/config.json" --out "$tmp/glm5fp8" \
  "${narrow[@]}" --fp8 --seed 11 --tokenizer-from "$root/models/tiny-dsa" >"$tmp/make8.out" 2>&1 &&
  model_dir="$tmp/glm5fp8" gen "$tmp/f0.out" --ignore-eos &&
  model_dir="$tmp/glm5fp8" gen "$tmp/f3.out" --ignore-eos --speculative-algorithm EAGLE \
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4; then
  expect "FP8: d = 3 greedy tokens equal d = 0's" \
    '[ "$(ids "$tmp/f0.out" | wc -l)" -eq 2 ] && [ "$(ids "$tmp/f3.out")" = "$(ids "$tmp/f0.out")" ]'
else
  echo "FAIL: the FP8 checkpoint"
  cat "$tmp/make8.out" "$tmp"/f?.out.err 2>/dev/null
  fail=1
fi

# The eos list: add request 0's third token to eos_token_id; when neither earlier token is an
# EOS id nor that token, the request must stop there (3 tokens, finish_reason "eos"), with and
# without speculation.
read -r t1 t2 t3 _ < <(ids_of "$tmp/d0.out" 0 | sed 's/.*\[//; s/\]//' | tr ',' ' ')
if [ -n "${t3:-}" ] && [ "$t3" -gt 3 ] && [ "$t1" -gt 3 ] && [ "$t2" -gt 3 ] &&
  [ "$t1" != "$t3" ] && [ "$t2" != "$t3" ]; then
  python3 - "$ck/config.json" "$t3" <<'PY'
import json, sys
p, t = sys.argv[1], int(sys.argv[2])
c = json.load(open(p))
c["eos_token_id"] = [1, 2, 3, t]
json.dump(c, open(p, "w"), indent=2)
PY
  for mode in d0 d3; do
    extra=()
    [ "$mode" = d3 ] && extra=(--speculative-algorithm EAGLE --speculative-num-steps 3
      --speculative-eagle-topk 1 --speculative-num-draft-tokens 4)
    if gen "$tmp/eos_$mode.out" "${extra[@]}"; then
      expect "$mode: stops on the 4th id of the eos list after 3 tokens" \
        'grep "\"index\":0," "$tmp/eos_$mode.out" | grep -q "\"completion_tokens\":3,.*\"finish_reason\":\"eos\""'
    else
      echo "FAIL: generate with the eos list ($mode)"
      cat "$tmp/eos_$mode.out.err"
      fail=1
    fi
  done
else
  echo "ok: (eos-list check skipped: request 0's first tokens $t1 $t2 $t3 repeat or are EOS ids)"
fi

# IndexShare is refused naming the key and the layer; so is a dense layer after a MoE one.
bad="$tmp/bad"
mkdir -p "$bad"
cp "$ck"/*.safetensors "$idx" "$ck/tokenizer.json" "$bad/"
python3 - "$ck/config.json" "$bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["indexer_types"] = ["full", "shared", "full"]
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
"$dsa" generate --model "$bad" --prompt hi --max-new-tokens 1 >"$tmp/bad.out" 2>&1
rc=$?
expect "shared indexer refused (rc 1)" '[ "$rc" -eq 1 ]'
expect "shared indexer refusal names key and layer" \
  'grep -q "indexer_types\[1\] = \"shared\": this layer reuses another layer'"'"'s top-k (IndexShare" "$tmp/bad.out"'
exit $fail
