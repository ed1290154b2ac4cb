// Launcher of the fused paged logits + top-k kernel: validate, plan the cluster and its shared
// memory, describe the pool's key pages and the q rows as tensor maps, launch one cluster per
// request on the current stream, and in checked mode return the device error word's Status.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cluster_launch.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/indexer_tensor_maps.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_kernel.cuh"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_launch.h"

namespace dsa::kernels {

namespace {
namespace detail = paged_logits_topk_detail;
constexpr const char* kOp = "paged_logits_topk_cuda";

int32_t chunk_for(int32_t width, int32_t cluster) {
  const int64_t keys = int64_t{width} * kPageSize;
  const int64_t per = (keys + cluster - 1) / cluster;
  return static_cast<int32_t>((per + kPageSize - 1) / kPageSize * kPageSize);
}

template <int H>
Status launch(const detail::Args& a, const PagedLogitsTopkLaunch& l, const CUtensorMap& keys,
              const CUtensorMap& q) {
  auto* kernel = detail::paged_logits_topk_kernel<H>;
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<detail::paged_logits_topk_kernel<H>>(
      detail::kSmemBudget + 1024));
  // The attribute also for C = 1: the kernel's cluster barriers need a cluster.
  cuda::LaunchShape shape{dim3(static_cast<unsigned>(int64_t{a.batch_pad} * l.cluster)),
                          dim3(detail::kThreads),
                          l.smem_bytes,
                          cuda::current_stream(),
                          static_cast<unsigned>(l.cluster),
                          true};
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(shape, kernel, a, keys, q));
  return ok_status();
}

}  // namespace

namespace {
int log2_of(int32_t c) { return c == 1 ? 0 : c == 2 ? 1 : c == 4 ? 2 : 3; }

template <int H>
Status max_clusters(int32_t cluster, uint32_t smem_bytes, int32_t* out) {
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<detail::paged_logits_topk_kernel<H>>(
      detail::kSmemBudget + 1024));
  cuda::ClusterLaunchConfig launch(static_cast<unsigned>(cluster), detail::kThreads, smem_bytes,
                                   nullptr, static_cast<unsigned>(cluster), true);
  int count = 0;
  DSA_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveClusters(&count, detail::paged_logits_topk_kernel<H>, &launch.config));
  *out = count;
  return ok_status();
}
}  // namespace

PagedLogitsTopkLaunch paged_logits_topk_launch(int32_t rows_per_request, int32_t num_heads,
                                               int32_t width, int32_t batch_pad,
                                               const ClusterCapacity& capacity) {
  PagedLogitsTopkLaunch l;
  auto try_cluster = [&](int32_t c, PagedLogitsTopkLaunch* out) {
    const int32_t chunk = chunk_for(width, c);
    if (chunk >= 65536) return false;  // the selection packs two per-CTA counts in 32 bits
    const detail::SmemPlan s = detail::plan_smem(rows_per_request, num_heads, chunk);
    if (s.stages == 0) return false;
    out->fits = true;
    out->cluster = c;
    out->chunk = chunk;
    out->stages = s.stages;
    out->rows_per_pass = s.rows_per_pass;
    out->smem_bytes = s.bytes;
    return true;
  };
  int32_t c = 1;
  while (c <= detail::kMaxCluster && !try_cluster(c, &l)) c *= 2;
  if (!l.fits) return l;
  // More CTAs per request while every cluster of the grid is still resident at once (a second
  // wave of clusters would cost more than the shorter key streams save).
  while (c < detail::kMaxCluster && batch_pad <= capacity[size_t(log2_of(2 * c))] &&
         chunk_for(width, 2 * c) >= 512) {
    c *= 2;
    try_cluster(c, &l);
  }
  return l;
}

StatusOr<ClusterCapacity> paged_logits_topk_capacity(int32_t rows_per_request, int32_t num_heads,
                                                     int32_t width) {
  static std::mutex mu;
  static std::map<std::tuple<int, int32_t, int32_t, int32_t>, ClusterCapacity> cache;
  int device = 0;
  DSA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const auto key = std::make_tuple(device, rows_per_request, num_heads, width);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  ClusterCapacity cap{};
  for (int32_t c = 1; c <= detail::kMaxCluster; c *= 2) {
    const int32_t chunk = chunk_for(width, c);
    const detail::SmemPlan s = detail::plan_smem(rows_per_request, num_heads, chunk);
    if (chunk >= 65536 || s.stages == 0) continue;
    int32_t* out = &cap[size_t(log2_of(c))];
    switch (num_heads) {
      case 16:
        DSA_RETURN_IF_ERROR(max_clusters<16>(c, s.bytes, out));
        break;
      case 32:
        DSA_RETURN_IF_ERROR(max_clusters<32>(c, s.bytes, out));
        break;
      default:
        DSA_RETURN_IF_ERROR(max_clusters<64>(c, s.bytes, out));
        break;
    }
  }
  cache.emplace(key, cap);
  return cap;
}

bool paged_logits_topk_fits(int32_t rows_per_request, int32_t num_heads, int32_t width) {
  return paged_logits_topk_launch(rows_per_request, num_heads, width, 1, ClusterCapacity{}).fits;
}

Status paged_logits_topk_cuda(const PagedLogitsTopkParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "pool.data", p.pool.data, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "q", p.q, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "w", p.w, 16));
  DSA_ASSIGN_OR_RETURN(
      const ClusterCapacity cap,
      paged_logits_topk_capacity(p.rows_per_request, p.num_heads, p.page_table.width));
  const PagedLogitsTopkLaunch l = paged_logits_topk_launch(p.rows_per_request, p.num_heads,
                                                           p.page_table.width, p.batch_pad, cap);
  if (!l.fits) {
    return Status(StatusCode::kResourceExhausted,
                  std::string(kOp) + ": n = " + std::to_string(p.rows_per_request) +
                      " rows of W P = " + std::to_string(int64_t{p.page_table.width} * kPageSize) +
                      " keys do not fit 8 CTAs' shared memory: use paged_logits + topk");
  }
  if (int64_t{p.batch_pad} * l.cluster > INT32_MAX) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(kOp) + ": batch_pad = " + std::to_string(p.batch_pad) +
                      " times the cluster size exceeds the grid limit");
  }
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  const detail::SmemPlan s = detail::plan_smem(p.rows_per_request, p.num_heads, l.chunk);
  const bool checked = checked_mode();
  detail::Args a{};
  a.w = p.w;
  a.row_len = p.row_len;
  a.req_slot = p.req_slot;
  a.page_table = p.page_table.data;
  a.pool = p.pool.data;
  a.idx = p.idx;
  a.err = err;
  a.table_rows = p.page_table.num_rows;
  a.W = p.page_table.width;
  a.num_pages = p.pool.num_pages;
  a.batch_pad = p.batch_pad;
  a.n = p.rows_per_request;
  a.heads = p.num_heads;
  a.k = p.k;
  a.checked = checked ? 1 : 0;
  a.cluster = l.cluster;
  a.chunk = l.chunk;
  a.row_stride = l.chunk + detail::kRowPad;
  a.stages = s.stages;
  a.q_rows_pad = s.q_rows_pad;
  a.rows_per_pass = s.rows_per_pass;
  a.off_q = s.off_q;
  a.off_scales = s.off_scales;
  a.off_w = s.off_w;
  a.off_items = s.off_items;
  a.off_bars = s.off_bars;
  a.off_logits = s.off_logits;
  a.off_ids = s.off_ids;

  CUtensorMap keys{}, q{};
  DSA_RETURN_IF_ERROR(indexer_keys_map(p.pool, &keys));
  DSA_RETURN_IF_ERROR(rows_128b_map(
      p.q, uint64_t(p.batch_pad) * uint64_t(p.rows_per_request) * uint64_t(p.num_heads), &q));
  switch (p.num_heads) {  // validate() admits only 16, 32, 64
    case 16:
      DSA_RETURN_IF_ERROR(launch<16>(a, l, keys, q));
      break;
    case 32:
      DSA_RETURN_IF_ERROR(launch<32>(a, l, keys, q));
      break;
    default:
      DSA_RETURN_IF_ERROR(launch<64>(a, l, keys, q));
      break;
  }
  return cuda::end_launch("paged_logits_topk_kernel", checked, kOp);
}

}  // namespace dsa::kernels
