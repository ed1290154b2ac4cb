// Token embedding gather on the GPU: y[t] = table[ids[t]], a bit-exact copy (class E).
// Checked mode: an id outside [0, V) reports OutOfRange {t, id} through the device error word;
// in both modes such a row is written as zeros and the table is never read out of bounds.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/embedding/embedding.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;

// One block copies one token's row: y[t, 0:D] = table[ids[t], 0:D] (zeros for a bad id). With
// `vec` (D % 8 == 0, both pointers 16-byte aligned) in 16-byte vectors, else element by element.
__global__ void embedding_kernel(const int32_t* __restrict__ ids, const bf16* __restrict__ table,
                                 bf16* __restrict__ y, int32_t vocab, int32_t dim, bool vec,
                                 cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool valid = id >= 0 && id < vocab;
  if (!valid && threadIdx.x == 0)
    cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                              static_cast<int32_t>(t), id);
  if (vec) {
    const int32_t nvec = dim / 8;
    const uint4* src = reinterpret_cast<const uint4*>(table + (valid ? int64_t{id} * dim : 0));
    uint4* dst = reinterpret_cast<uint4*>(y + t * dim);
    for (int32_t v = threadIdx.x; v < nvec; v += blockDim.x)
      dst[v] = valid ? src[v] : make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const bf16* src = table + (valid ? int64_t{id} * dim : 0);
  bf16* dst = y + t * dim;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = valid ? src[d] : bf16{0};
}

}  // namespace

Status embedding_cuda(const EmbeddingParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const bool vec = p.dim % 8 == 0 && cuda::is_aligned(p.table, 16) && cuda::is_aligned(p.y, 16);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(p.num_tokens), dim3(kThreads), size_t(0), cuda::current_stream()},
      embedding_kernel, p.ids, p.table, p.y, p.vocab_size, p.dim, vec, err));
  return cuda::end_launch("embedding", checked, "embedding: ids[row] outside [0, vocab_size)");
}

}  // namespace dsa::kernels
