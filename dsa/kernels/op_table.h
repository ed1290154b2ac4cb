// The op table: one plain function table per backend, chosen once (ARCHITECTURE.md §2).
// Layers above kernels/ (the model, `dsa check`) call ops only through it.
#pragma once

#include <string_view>

#include "dsa/core/status.h"
#include "dsa/kernels/indexer_write/indexer_write.h"

namespace dsa::kernels {

enum class Backend { kCpu, kCuda };

struct OpTable {
  Backend backend;
  std::string_view name;
  Status (*indexer_write)(const IndexerWriteParams&);
};

// The CPU backend: the references of every op.
const OpTable& cpu_ops();

// The CUDA backend; Unimplemented ("not built") until its kernels land, or in host-only builds.
StatusOr<const OpTable*> cuda_ops();

StatusOr<const OpTable*> ops_for(Backend backend);

}  // namespace dsa::kernels
