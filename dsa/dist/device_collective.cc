#include "dsa/dist/device_collective.h"

namespace dsa::dist {

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
