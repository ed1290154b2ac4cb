// The multi-node bootstrap (docs/multi_gpu.md): before NCCL can start, every process needs the
// ncclUniqueId that global rank 0 made. Rank 0 listens on --dist-init-addr host:port; every other
// rank connects, says who it is and which flags it runs with (a hash), and receives the id once
// all ranks have checked in. Plain TCP, host code only: tested on loopback with several processes.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::dist {

// NCCL's ncclUniqueId, as bytes (nccl_group.h static_asserts the size).
inline constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<uint8_t, kNcclIdBytes>;

struct InitAddr {
  std::string host;
  int32_t port = 0;
};

// "host:port" (the last ':' splits, port in [1, 65535]); InvalidArgument naming the value.
StatusOr<InitAddr> parse_init_addr(std::string_view text);

struct BootstrapConfig {
  InitAddr addr;
  int32_t rank = 0;  // global rank: node_rank * ranks_per_node + local_rank
  int32_t world_size = 1;
  uint64_t flags_hash = 0;  // of the flags every rank must share (model, d, buckets, D/T/E, ...)
  std::chrono::milliseconds timeout{60000};
};

// Rank 0 serves `id` and returns it once every rank has it; any other rank returns the id it
// received (`id` is ignored). Errors, each naming what went wrong: a rank with other flags, a
// duplicate or out-of-range rank (rank 0 refuses it and fails every waiting rank too), nobody
// listening or a rank missing within the timeout (naming the missing ranks), a broken exchange.
StatusOr<NcclId> exchange_unique_id(const BootstrapConfig& config, const NcclId& id);

}  // namespace dsa::dist
