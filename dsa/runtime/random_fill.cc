#include "dsa/runtime/random_fill.h"

#if defined(DSA_HAVE_CUDA)
#include "dsa/cuda/random_fill.h"
#endif

namespace dsa::runtime {

Status random_fill(kernels::Backend backend, void* dst, size_t count, const FillSpec& spec) {
  if (count > 0 && dst == nullptr) return invalid_argument("random_fill: null destination");
  if (backend == kernels::Backend::kCpu) {
    for (size_t i = 0; i < count; ++i) fill_element(spec, dst, i);
    return ok_status();
  }
#if defined(DSA_HAVE_CUDA)
  return cuda::random_fill_async(dst, count, spec);
#else
  return unimplemented("random_fill on cuda: not built (this build has no nvcc)");
#endif
}

}  // namespace dsa::runtime
