// RoPE in config.json (SPEC.md §8.3): V3.2's rope_theta + yarn rope_scaling, or rope_parameters
// (GLM-5; transformers >= 5 writes every config this way) with rope_type "default" (plain RoPE)
// or "yarn". Both land in ModelConfig::rope_theta and ModelConfig::rope_scaling.
#pragma once

#include "dsa/core/status.h"
#include "dsa/model/json_reader.h"
#include "dsa/model/model_config.h"

namespace dsa::model {

// rope_parameters when present, else rope_theta and rope_scaling. Requires
// c->max_position_embeddings (plain RoPE's neutral L0). kInvalidArgument naming the key.
Status read_rope(const JsonReader& r, ModelConfig* c);

}  // namespace dsa::model
