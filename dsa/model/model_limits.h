// The largest model dsa's loaders accept: every size in config.json, tokenizer.json and the
// safetensors header is checked against these caps before anything is sized from it, so a
// corrupt or hostile file gets one Status instead of a hang (a loop over 10^12 layers), a
// bad_alloc or an overflowed product.
//
// The caps are generous for the checkpoints dsa serves (DeepSeek-V3.2: vocab 129280, hidden 7168,
// 61 layers, 256 experts, 128 heads; the GLM-5 family is of the same order) and bounded by what
// the runtime can execute. Each is at most 2^20, so the product of any three of them is below
// 2^60 and no size computed from a validated config can overflow int64.
#pragma once

#include <cstdint>

namespace dsa::model {

// Token ids index the embedding, the LM head and the tokenizer's dense id tables.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 20;
// hidden_size: rows of every norm and the in-width of every projection.
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 15;
// Every other width: MLP and expert widths, q_lora_rank and the per-layer head concatenations
// (num_attention_heads x head dim, index heads x index dim, shared experts x expert width).
inline constexpr int64_t kMaxWidth = int64_t{1} << 18;
// qk_nope_head_dim and v_head_dim.
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxLayers = 256;
// moe_group_cuda counts the (token, expert) pairs of each expert in shared memory, 512 at most.
inline constexpr int64_t kMaxRoutedExperts = 512;
inline constexpr int64_t kMaxSharedExperts = 64;
// max_position_embeddings and rope_scaling.original_max_position_embeddings (the RoPE kernels
// take positions as int32).
inline constexpr int64_t kMaxPositions = int64_t{1} << 20;

static_assert(kMaxVocabSize <= (1 << 20) && kMaxHiddenSize <= (1 << 20) && kMaxWidth <= (1 << 20) &&
                  kMaxHeadDim <= (1 << 20) && kMaxLayers <= (1 << 20) &&
                  kMaxRoutedExperts <= (1 << 20) && kMaxSharedExperts <= (1 << 20) &&
                  kMaxPositions <= (1 << 20),
              "every cap <= 2^20 keeps products of three validated sizes below 2^60");

// config.json and tokenizer.json are read whole into memory; real ones are a few KB and a few MB
// (DeepSeek-V3's tokenizer.json is 7.8 MB), so anything larger is not a file worth parsing.
inline constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;
inline constexpr int64_t kMaxTokenizerFileBytes = int64_t{256} << 20;
// JSON nesting deeper than this is rejected while parsing: config.json and tokenizer.json nest
// four levels, a safetensors header three, and printing or comparing a deeper value recurses.
inline constexpr int kMaxJsonDepth = 64;

}  // namespace dsa::model
