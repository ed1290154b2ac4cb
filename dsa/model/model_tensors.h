// The tensor inventory of a DeepSeek-V3.2 checkpoint (SPEC.md §8.2) for a given ModelConfig, and
// the check that a safetensors file holds exactly that inventory. Run once at load, it turns a
// checkpoint/config mismatch (wrong width, missing expert, stray layer) into one Status instead of
// a wrong answer deep inside the forward pass.
#pragma once

#include <string>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/core/tensor.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/model_config.h"

namespace dsa::model {

// Which stored dtypes a tensor may have.
enum class TensorKind {
  kLinear,  // bf16, or e4m3 + an f32 `weight_scale_inv` sibling when the config is quantized
  kMatrix,  // bf16 only: embeddings, LM heads, the router, indexer weights_proj (never quantized)
  kVector,  // norm weights and the k_norm bias: bf16 or f32 ("stored dtype", §8.2)
  kF32,     // mlp.gate.e_score_correction_bias
};

struct ExpectedTensor {
  std::string name;
  Shape shape;  // [out, in] for matrices
  TensorKind kind;
  bool optional = false;  // the MTP layer's own embed_tokens / shared_head.head (§8.2)
};

// Target layers 0..L-1 (dense MLP below first_k_dense_replace, MoE after), then, when the config
// has an MTP layer, layer L with enorm/hnorm/eh_proj/shared_head and a full MoE block with its own
// indexer. Order: globals, then layer by layer.
std::vector<ExpectedTensor> expected_model_tensors(const ModelConfig& config);

// Name of the FP8 scale sibling of `weight_name` ("X.weight" -> "X.weight_scale_inv").
std::string scale_inv_name(const std::string& weight_name);

// Every required tensor present with its dtype and shape; FP8 weights (only with a
// quantization_config) carry an f32 [ceil(out/128), ceil(in/128)] scale; and no tensor that the
// inventory does not name. The first problem found is returned: kNotFound for a missing tensor,
// kInvalidArgument otherwise; every message names the file (the tensor's shard when sharded) and
// the tensor. A weight and its scale may sit in different shards.
Status check_model_tensors(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace dsa::model
