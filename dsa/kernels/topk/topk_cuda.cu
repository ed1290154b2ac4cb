// Launcher of the top-k kernel (SPEC.md §3e; the kernel and its design in topk_kernel.cuh).
#include <cuda_runtime.h>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/kernels/topk/topk_kernel.cuh"

namespace dsa::kernels {

namespace {
using topk_detail::kClusterSize;
using topk_detail::KernelArgs;
using topk_detail::kThreads;
using topk_detail::Smem;
using topk_detail::topk_kernel;

constexpr size_t kSmemBytes = sizeof(Smem);
}  // namespace

Status topk_cuda(const TopkParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.rows == 0 && p.plan == nullptr) return ok_status();
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<topk_kernel>(kSmemBytes));
  // The plan header is checked on the device in unchecked mode too: the word is always passed.
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  const bool checked = checked_mode();

  // A cluster per row only when some row could be long (lengths are clamped to ld - col_base, so
  // ld < long_row_min_len rules it out) and the rows alone do not fill the GPU. A function of
  // capacities and the row count only (graph-safe, §5).
  const int32_t cluster =
      p.logits_ld >= p.long_row_min_len && p.rows <= p.cluster_max_rows ? kClusterSize : 1;
  const KernelArgs args{p.logits,  p.logits_ld, p.rows,       p.len,      p.col_base,
                        p.k,       p.variant,   p.page_table, p.row_page, p.offset,
                        p.out_row, p.out_rows,  p.idx,        p.plan,     p.long_row_min_len,
                        cluster,   checked,     err};

  // rows == 0 with a plan: one cluster checks the header and leaves.
  const int64_t blocks = int64_t{p.rows > 0 ? p.rows : 1} * cluster;
  if (blocks > INT32_MAX) {
    return invalid_argument("topk_cuda: rows * cluster size exceeds the grid limit");
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = cuda::current_stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = cluster > 1 ? 1 : 0;
  DSA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, topk_kernel, args));
  return cuda::end_launch("topk_kernel", checked, "topk_cuda");
}

}  // namespace dsa::kernels
