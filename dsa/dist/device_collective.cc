#include "dsa/dist/device_collective.h"

namespace dsa::dist {

void sum_bf16_blocks(std::span<const bf16* const> blocks, size_t count, bf16* out) {
  for (size_t i = 0; i < count; ++i) {
    float acc = bf16_to_float(blocks[0][i]);
    for (size_t q = 1; q < blocks.size(); ++q) acc += bf16_to_float(blocks[q][i]);
    out[i] = float_to_bf16(acc);
  }
}

Status SoloDeviceCollective::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  if (bytes_per_rank == 0) return ok_status();
  return copy_(recv, send, bytes_per_rank);
}

// One rank: the sum is the rank's own element, exactly.
Status SoloDeviceCollective::reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) {
  if (count == 0) return ok_status();
  return copy_(recv, send, count * sizeof(bf16));
}

}  // namespace dsa::dist
