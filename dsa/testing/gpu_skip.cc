#include "dsa/testing/gpu_skip.h"

#if defined(DSA_HAVE_CUDA)
#include "dsa/cuda/device_info.h"
#endif

namespace dsa::testing {
bool cuda_device_available() {
#if defined(DSA_HAVE_CUDA)
  return dsa::cuda::device_count() > 0;
#else
  return false;
#endif
}
}  // namespace dsa::testing
