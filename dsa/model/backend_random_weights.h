// Random weights made where the backend keeps them (--random-weights on CUDA: 40 GB need not cross
// a disk or the host), into the WeightStore, over a layout with no host data
// (model_weight_layout). Each vector gets its own counter-based stream (core/random_fill.h) keyed
// by (seed, its index in the walk), filled by a kernel on the device (a host loop on the CPU
// backend, bit-identical). Magnitudes as make-checkpoint's (random_tensors.h): linears and
// matrices uniform(+-sqrt(3 / in)), the embedding uniform(+-1), norm weights 1, biases 0; an FP8
// linear gets e4m3 codes of uniform(+-a / s) under one scale_inv s = a / 448 per 128x128 block
// (rounded up to a power of two under scale_fmt ue8m0), so W = code x s is uniform(+-a) as a
// quantised real weight of that amplitude would be. The values differ from the host generator's
// (another stream), not their distribution.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/weight_store.h"

namespace dsa::model {

// Generates every vector of `layout` (model_weight_layout(config), at its final address: the store
// keys by it) into `store`, with the expert pointer tables of bf16 MoE layers.
Status generate_backend_weights(WeightStore& store, const ModelWeights& layout,
                                const ModelConfig& config, uint64_t seed);

}  // namespace dsa::model
