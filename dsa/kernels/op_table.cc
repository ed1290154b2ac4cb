#include "dsa/kernels/op_table.h"

namespace dsa::kernels {

const OpTable& cpu_ops() {
  static const OpTable table{
      .backend = Backend::kCpu,
      .name = "cpu",
      .indexer_write = indexer_write_ref,
  };
  return table;
}

StatusOr<const OpTable*> cuda_ops() {
#if defined(DSA_HAVE_CUDA)
  return unimplemented("cuda backend: not built yet (nvcc present, no CUDA kernels have landed)");
#else
  return unimplemented("cuda backend: not built (this build has no nvcc; host-only)");
#endif
}

StatusOr<const OpTable*> ops_for(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return &cpu_ops();
    case Backend::kCuda:
      return cuda_ops();
  }
  return internal_error("unknown backend");
}

}  // namespace dsa::kernels
