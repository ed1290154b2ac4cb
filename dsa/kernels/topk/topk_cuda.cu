// Launcher of the top-k kernels (SPEC.md §3e): the one-pass kernel (topk_onepass_kernel.cuh)
// whenever a cluster of 8 CTAs can hold a row of ld in shared memory and the rows are not both
// many and wide, else the streaming kernel (topk_stream_kernel.cuh). Both choices, and the
// cluster size, are functions of (R, ld, launch constants, SM count) only, so a captured graph
// replays the launch it was captured with; which path a row takes inside the kernel follows the
// row's own length. The two kernels select the same sets but order them differently inside idx
// (both deterministic, SPEC.md §3e rule 3), so a row's idx order can change with R.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/kernels/topk/topk_cuda_launch.h"
#include "dsa/kernels/topk/topk_onepass_kernel.cuh"
#include "dsa/kernels/topk/topk_stream_kernel.cuh"

namespace dsa::kernels {

namespace {
using topk_detail::kClusterSize;
using topk_detail::KernelArgs;
using topk_detail::kThreads;

Status launch(void (*kernel)(KernelArgs), const KernelArgs& args, int32_t rows, int32_t cluster,
              size_t smem_bytes) {
  // rows == 0 with a plan: one cluster checks the header and leaves.
  const int64_t blocks = int64_t{rows > 0 ? rows : 1} * cluster;
  if (blocks > INT32_MAX) {
    return invalid_argument("topk_cuda: rows * cluster size exceeds the grid limit");
  }
  cuda::LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem_bytes,
                          cuda::current_stream(), static_cast<unsigned>(cluster)};
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(shape, kernel, args));
  return ok_status();
}
template <TopkVariant V>
Status launch_onepass(const KernelArgs& args, int32_t rows, const TopkLaunch& l) {
  constexpr size_t kMaxBytes = topk_detail::onepass_smem_bytes(kTopkMaxChunk);
  DSA_RETURN_IF_ERROR(
      cuda::allow_dynamic_smem_once<topk_detail::topk_onepass_kernel<V>>(kMaxBytes));
  return launch(topk_detail::topk_onepass_kernel<V>, args, rows, l.cluster,
                topk_detail::onepass_smem_bytes(l.chunk_cap));
}
Status launch_onepass_variant(TopkVariant v, const KernelArgs& args, int32_t rows,
                              const TopkLaunch& l) {
  switch (v) {
    case TopkVariant::kPaged:
      return launch_onepass<TopkVariant::kPaged>(args, rows, l);
    case TopkVariant::kRagged:
      return launch_onepass<TopkVariant::kRagged>(args, rows, l);
    case TopkVariant::kPlain:
      break;
  }
  return launch_onepass<TopkVariant::kPlain>(args, rows, l);
}
}  // namespace

TopkLaunch choose_topk_launch(const TopkParams& p, int sms) {
  TopkLaunch l;
  const int64_t need = int64_t{p.logits_ld} + 3;  // virtual columns of the widest row
  auto chunk_for = [&](int32_t c) { return (need + c - 1) / c; };
  int32_t fit = 1;
  while (fit <= kClusterSize && chunk_for(fit) > p.max_chunk) fit *= 2;
  const int64_t many_rows = p.stream_min_rows >= 0 ? p.stream_min_rows : int64_t{sms} + 1;
  if (fit > kClusterSize || (p.rows >= many_rows && p.logits_ld >= 65536)) {
    l.path = TopkLaunch::Path::kStream;
    l.cluster =
        p.logits_ld >= p.long_row_min_len && p.rows <= p.cluster_max_rows ? kClusterSize : 1;
    return l;
  }
  int32_t c = std::max(fit, p.cluster_size);
  if (p.cluster_size == 0) {
    // More CTAs per row while the grid stays within half the SMs and the chunks stay worth a
    // CTA. H200, warm L2, K 2048: 32 x 32K is 26.4 / 22.1 / 32.0 us on 1 / 2 / 4 CTAs per row,
    // 32 x 64K 28.9 / 38.7 on 2 / 4, while 4 x 128K is 27.8 / 23.6 on 4 / 8: past ~66 CTAs
    // the cluster's barriers and peer reads cost more than the shorter chunks save.
    while (c < kClusterSize && int64_t{p.rows} * 2 * c * 2 <= sms &&
           chunk_for(2 * c) >= kTopkMinSplitChunk) {
      c *= 2;
    }
  }
  l.path = TopkLaunch::Path::kOnePass;
  l.cluster = c;
  l.chunk_cap = int32_t((chunk_for(c) + 127) / 128 * 128);
  return l;
}

Status topk_cuda(const TopkParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.rows == 0 && p.plan == nullptr) return ok_status();
  DSA_ASSIGN_OR_RETURN(const int sms, cuda::sm_count());
  const TopkLaunch l = choose_topk_launch(p, sms);
  // The plan header is checked on the device in unchecked mode too: the word is always passed.
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  const bool checked = checked_mode();
  const KernelArgs args{p.logits,    p.logits_ld, p.rows,       p.len,      p.col_base,
                        p.k,         p.variant,   p.page_table, p.row_page, p.offset,
                        p.out_row,   p.out_rows,  p.idx,        p.plan,     p.long_row_min_len,
                        l.chunk_cap, l.cluster,   checked,      err};
  if (l.path == TopkLaunch::Path::kOnePass) {
    DSA_RETURN_IF_ERROR(launch_onepass_variant(p.variant, args, p.rows, l));
    return cuda::end_launch("topk_onepass_kernel", checked, "topk_cuda");
  }
  constexpr size_t kStreamBytes = sizeof(topk_detail::StreamSmem);
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<topk_detail::topk_stream_kernel>(kStreamBytes));
  DSA_RETURN_IF_ERROR(
      launch(topk_detail::topk_stream_kernel, args, p.rows, l.cluster, kStreamBytes));
  return cuda::end_launch("topk_stream_kernel", checked, "topk_cuda");
}

}  // namespace dsa::kernels
