# Shared by the CLI tests that build narrow V3.2-shaped models (source it after setting `fail`):
# `narrow`, make-checkpoint's overrides that cut testdata/deepseek-v3.2/config.json's widths and
# layer count while keeping its layout (FP8 linears, MoE with group routing, the MTP layer), with
# vocab_size cut to the tiny tokenizer's 6144 ids; and expect_lib.sh's `expect "what" condition`.
narrow=(--num-hidden-layers 3 --n-routed-experts 4 --hidden-size 256
  --set first_k_dense_replace=1 --set n_group=2 --set topk_group=1 --set num_experts_per_tok=2
  --set num_attention_heads=16 --set num_key_value_heads=16 --set index_n_heads=16
  --set q_lora_rank=128 --set intermediate_size=512 --set moe_intermediate_size=128
  --set vocab_size=6144 --set index_topk=128)

# shellcheck source=tests/cli/expect_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/expect_lib.sh"
