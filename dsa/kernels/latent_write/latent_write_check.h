// `dsa check latent_write`: runs the reference on random latents scattered to random slots of a
// poisoned pool and compares every pool byte with an independently written expectation.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/latent_write/latent_write.h"

namespace dsa::kernels {

// OK when every byte matches; otherwise Internal naming the first differing slot and byte.
// tokens >= 0; every 5th token is a padded row (slot -1).
using LatentWriteFn = Status (*)(const LatentWriteParams&);

Status check_latent_write(LatentWriteFn op, int32_t tokens, LatentFormat format, uint64_t seed);

}  // namespace dsa::kernels
