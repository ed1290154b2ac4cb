// Random tensors at a config's inventory (expected_model_tensors), as `dsa make-checkpoint` writes
// them and `--random-weights` loads them: linears and matrices uniform(+-sqrt(3 / in)) (the
// embedding uniform(+-1)), so activations keep their scale through every layer; norm weights 1,
// biases 0; FP8 linears (with a quantization_config) quantised as real checkpoints are, e4m3 codes
// with one f32 weight_scale_inv = amax / 448 per 128x128 block (rounded up to a power of two under
// scale_fmt ue8m0). Each weight's stream is SplitMix64 seeded by (seed, FNV-1a of its name), so a
// tensor's values do not depend on the sharding or on the other tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/core/tensor.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_tensors.h"

namespace dsa::model {

// One stored tensor: name, dtype, shape, and the inventory entry it fills (the weight, for a
// scale).
struct RandomTensor {
  std::string name;
  DType dtype;
  Shape shape;
  const ExpectedTensor* source;
  bool is_scale = false;
  uint64_t nbytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }
};

// A weight and its scale (they stay in one shard, as upstream writes them).
struct RandomUnit {
  std::vector<RandomTensor> tensors;
  uint64_t nbytes = 0;
};

// The stored tensors of every required inventory entry (the MTP layer's optional own
// embed_tokens / shared_head.head are left out: it shares the target's), in inventory order.
std::vector<RandomUnit> plan_random_tensors(const ModelConfig& config,
                                            const std::vector<ExpectedTensor>& inventory);

// Whether the config's FP8 scales are powers of two (scale_fmt ue8m0).
bool random_scales_pow2(const ModelConfig& config);

// The stored bytes of `t` — for an FP8 weight its codes followed by its scale (which must be the
// next tensor in the file); empty for a scale (written with its weight).
std::string random_tensor_bytes(const RandomTensor& t, uint64_t seed, bool pow2);

// The safetensors header JSON of `tensors` laid out in order, padded to a multiple of 8 bytes.
std::string safetensors_header_for(const std::vector<const RandomTensor*>& tensors);

// Bytes of every stored tensor of the config.
uint64_t random_weight_bytes(const ModelConfig& config);

// The whole random checkpoint of `config` as one safetensors image in memory (no file written or
// read): load_model_weights reads it as it reads a real one, so the forward sees exactly what a
// make-checkpoint directory with the same seed gives.
StatusOr<Checkpoint> random_checkpoint(const ModelConfig& config, uint64_t seed);

}  // namespace dsa::model
