// Device pieces both top-k kernels share (SPEC.md §3e): the launch arguments, the order-preserving
// key, the idx image of a position, block and warp scans, the histogram bin search (over one CTA
// or a thread-block cluster), the plan and checked-mode checks, and the row prologue that applies
// the unchecked neutralisation. The kernels are topk_onepass_kernel.cuh (rows held in shared
// memory, read from HBM once) and topk_stream_kernel.cuh (rows wider than a cluster can hold).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/cuda/error_word.h"
#include "dsa/kernels/topk/topk.h"

namespace dsa::kernels::topk_detail {

namespace cg = cooperative_groups;

inline constexpr int kThreads = 512;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kBins = 2048;      // 11-bit digits (the last pass uses 1024 bins)
inline constexpr int kClusterSize = 8;  // most CTAs per row (the portable cluster maximum)

struct KernelArgs {
  const float* logits;  // [R, ld]
  int64_t ld;
  int32_t rows;
  const int32_t* len;       // [R]
  const int32_t* col_base;  // [R] or null
  int32_t k;
  TopkVariant variant;
  PageTable page_table;
  const int32_t* row_page;  // [R_out]
  const int32_t* offset;    // [R]
  const int32_t* out_row;   // [R] or null
  int32_t out_rows;
  int32_t* idx;  // [R_out, K]
  const TopkPlanHeader* plan;
  int32_t long_row_min_len;  // stream kernel: rows this long take every CTA of the cluster
  int32_t chunk_cap;         // one-pass kernel: floats one CTA holds in shared memory
  int32_t cluster;           // CTAs per row in the grid (1 .. kClusterSize)
  bool checked;
  cuda::DeviceErrorWord* err;
};

// The bin that holds the K-th key of a pass, with the counts above it: over the whole row (tot)
// and over the lower ranks of the cluster only (low).
struct BinChoice {
  uint32_t bin, above_tot, above_low, bin_tot, bin_low;
};

// ---- keys, images, scans -------------------------------------------------------------------

// Order-preserving key: a ranks above b iff key(a) > key(b). Every NaN -> 0 (below -inf, whose
// key is 0x007FFFFF); -0 and +0 -> 0x80000000.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  if (v != v) return 0u;
  if ((u << 1) == 0u) return 0x80000000u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Turns a position of a row into its idx entry (unchecked neutralisation done). Everything it
// needs is copied into registers when the row starts: read through a pointer to the kernel
// parameters, every idx store (a generic pointer that might alias them) would force a reload of
// the variant and the table fields before the next entry, one dependent load per entry.
struct Image {
  TopkVariant variant;
  int32_t offset;            // kRagged: added to every position
  const int32_t* table_row;  // kPaged: the row's page ids (row 0 when row_page was out of range)
  int32_t width, num_pages;  // kPaged: the table's width and the pool's pages
  // With the variant known at compile time (the one-pass kernel has one instantiation each).
  template <TopkVariant V>
  __device__ __forceinline__ int32_t map(int32_t p) const {
    if constexpr (V == TopkVariant::kPaged) {
      const int32_t j = p / kPageSize;
      int32_t id = j < width ? table_row[j] : 0;
      if (id < 0 || id >= num_pages) id = 0;
      return id * kPageSize + p % kPageSize;
    } else if constexpr (V == TopkVariant::kRagged) {
      return static_cast<int32_t>(uint32_t(offset) + uint32_t(p));
    } else {
      return p;
    }
  }
  __device__ __forceinline__ int32_t operator()(int32_t p) const {
    if (variant == TopkVariant::kPaged) {
      const int32_t j = p / kPageSize;
      int32_t id = j < width ? table_row[j] : 0;
      if (id < 0 || id >= num_pages) id = 0;
      return id * kPageSize + p % kPageSize;
    }
    if (variant == TopkVariant::kRagged)
      return static_cast<int32_t>(uint32_t(offset) + uint32_t(p));
    return p;
  }
};

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  return x;
}

// Exclusive prefix sum over the block in thread order; `total` gets the block sum. Every thread
// must call it (three barriers, the last one so `buf` may be reused at once).
template <typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T& total, T* buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T x = warp_inclusive_scan(v);
  if (lane == 31) buf[warp] = x;
  __syncthreads();
  if (warp == 0) {
    T w = lane < kWarps ? buf[lane] : T(0);
    w = warp_inclusive_scan(w);
    if (lane < kWarps) buf[lane] = w;
  }
  __syncthreads();
  total = buf[kWarps - 1];
  const T excl = (warp > 0 ? buf[warp - 1] : T(0)) + x - v;
  __syncthreads();
  return excl;
}

// ---- the bin search ---------------------------------------------------------------------------

// kPer consecutive histogram words [first, first + kPer) of cluster rank `rank`'s copy of `hist`
// (kPer = 2 or 4, first a multiple of kPer, hist 16-byte aligned): one distributed-shared-memory
// vector load. Plain loads through the mapped pointer, so the loads of several ranks issue back
// to back (the cluster barrier before the bin search orders them after the peers' writes).
template <int kPer>
__device__ __forceinline__ void load_peer_bins(const uint32_t* hist, int first, int rank,
                                               uint32_t (&v)[kPer]) {
  const uint32_t* peer = cg::this_cluster().map_shared_rank(hist + first, rank);
  if constexpr (kPer == 4) {
    const uint4 x = *reinterpret_cast<const uint4*>(peer);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    static_assert(kPer == 2);
    const uint2 x = *reinterpret_cast<const uint2*>(peer);
    v[0] = x.x, v[1] = x.y;
  }
}

// Finds the bin of `hist` (NB bins, the same offset in every CTA of the row) holding the krem-th
// best key, summing the histograms of the n_coop CTAs of the row (the lower ranks' share kept
// apart). Result in `choice`, for every thread. Thread t owns the kPer bins just below
// NB - kPer * t, so a scan in thread order counts the keys of higher bins.
template <int NB>
__device__ void find_bin(const uint32_t* hist, unsigned long long* scan64, BinChoice& choice,
                         uint32_t krem, int n_coop, int rank) {
  constexpr int kPer = NB / kThreads;
  const int first = NB - kPer * (int(threadIdx.x) + 1);
  uint32_t tot[kPer], low[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    tot[i] = hist[first + i];
    low[i] = 0;
  }
  if (n_coop > 1) {
    uint32_t v[kClusterSize][kPer];
#pragma unroll
    for (int c = 0; c < kClusterSize; ++c) {  // every load first, then the sums
      if (c < n_coop) {
        load_peer_bins<kPer>(hist, first, c, v[c]);
      } else {
#pragma unroll
        for (int i = 0; i < kPer; ++i) v[c][i] = 0;
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      tot[i] = 0;
#pragma unroll
      for (int c = 0; c < kClusterSize; ++c) {
        tot[i] += v[c][i];
        low[i] += c < rank ? v[c][i] : 0u;
      }
    }
  }
  unsigned long long sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) sum += (static_cast<unsigned long long>(tot[i]) << 32) | low[i];
  unsigned long long all;
  const unsigned long long excl = block_exclusive_scan(sum, all, scan64);
  uint32_t above_tot = uint32_t(excl >> 32), above_low = uint32_t(excl);
#pragma unroll
  for (int i = kPer - 1; i >= 0; --i) {  // descending bins
    if (above_tot < krem && above_tot + tot[i] >= krem) {
      choice = {uint32_t(first + i), above_tot, above_low, tot[i], low[i]};
    }
    above_tot += tot[i];
    above_low += low[i];
  }
  __syncthreads();
}

__device__ __forceinline__ void row_sync(int n_coop) {
  if (n_coop > 1) {
    cg::this_cluster().sync();
  } else {
    __syncthreads();
  }
}

// ---- checks and neutralisation ---------------------------------------------------------------

__device__ __forceinline__ void report(const KernelArgs& a, StatusCode code, int32_t row,
                                       int32_t value) {
  cuda::report_device_error(a.err, code, cuda::OpId::kTopk, row, value);
}

// Plan header (§3e): magic, R and K always; the length hash in checked mode. Block-uniform;
// `hash` is a shared-memory word.
__device__ void check_plan(uint32_t& hash, const KernelArgs& a) {
  const TopkPlanHeader h = *a.plan;
  if (threadIdx.x == 0) {
    if (h.magic != kTopkPlanMagic) {
      report(a, StatusCode::kFailedPrecondition, 0, int32_t(h.magic));
    } else if (h.rows != a.rows) {
      report(a, StatusCode::kFailedPrecondition, 0, h.rows);
    } else if (h.k != a.k) {
      report(a, StatusCode::kFailedPrecondition, 0, h.k);
    }
  }
  if (!a.checked) return;
  if (threadIdx.x == 0) hash = 0;
  __syncthreads();
  uint32_t part = 0;  // the §3c sum wraps mod 2^32, so any summation order gives the same bits
  for (int32_t r = threadIdx.x; r < a.rows; r += kThreads) {
    part += uint32_t(a.len[r]) * uint32_t(2 * int64_t{r} + 1);
  }
  atomicAdd(&hash, part);
  __syncthreads();
  if (threadIdx.x == 0 && hash != h.len_hash) {
    report(a, StatusCode::kFailedPrecondition, 0, int32_t(h.len_hash));
  }
  __syncthreads();
}

// Checked-mode rules of row r (rank 0 only); the page rules only for an output row o >= 0.
__device__ void check_row(const KernelArgs& a, int32_t r, int32_t o, int32_t raw_len,
                          int32_t raw_base) {
  if (threadIdx.x == 0) {
    if (raw_len < 0) report(a, StatusCode::kOutOfRange, r, raw_len);
    if (raw_base < 0) report(a, StatusCode::kOutOfRange, r, raw_base);
    if (int64_t{raw_base} + raw_len > a.ld) report(a, StatusCode::kOutOfRange, r, raw_len);
    if (a.variant == TopkVariant::kRagged) {
      const int32_t off = a.offset[r];
      if (off < 0 || int64_t{off} + raw_len > INT32_MAX) {
        report(a, StatusCode::kOutOfRange, r, off);
      }
    }
  }
  if (a.variant != TopkVariant::kPaged || o < 0 || raw_len < 0) return;
  const PageTable& pt = a.page_table;
  const int32_t prow = a.row_page[o];
  if (prow < 0 || prow >= pt.num_rows) {
    if (threadIdx.x == 0) report(a, StatusCode::kOutOfRange, o, prow);
    return;
  }
  const int64_t pages = (int64_t{raw_len} + kPageSize - 1) / kPageSize;
  if (pages > pt.width && threadIdx.x == 0) report(a, StatusCode::kOutOfRange, r, raw_len);
  const int64_t readable = min(pages, int64_t{pt.width});
  for (int64_t j = threadIdx.x; j < readable; j += kThreads) {
    const int32_t id = pt.data[int64_t{prow} * pt.width + j];
    if (id < 1 || id >= pt.num_pages) report(a, StatusCode::kOutOfRange, r, id);
  }
}

// The idx row row r writes, or -1: out_row entries out of range are dropped, and of repeated
// entries only the last row writes (as the reference), so no two CTAs race on an idx row.
// Block-uniform; reports the checked-mode out_row rules.
__device__ int32_t target_row(const KernelArgs& a, int32_t r, int32_t o, bool report_errors) {
  if (a.out_row == nullptr) return r;
  if (o < 0 || o >= a.out_rows) {
    if (report_errors && o != -1 && threadIdx.x == 0) report(a, StatusCode::kOutOfRange, r, o);
    return -1;
  }
  bool repeated = false;
  for (int32_t r2 = r + 1 + int32_t(threadIdx.x); r2 < a.rows; r2 += kThreads) {
    if (a.out_row[r2] == o) {
      repeated = true;
      if (report_errors) report(a, StatusCode::kOutOfRange, r2, o);
    }
  }
  return __syncthreads_or(repeated) ? -1 : o;
}

// What one CTA does for its row after the checks and the neutralisation.
struct RowJob {
  const float* src;  // the row's first visible logit
  int64_t len;       // visible length after the clamps (0 <= len <= ld - base)
  int32_t* out;      // the idx row, K entries (stored with st.global: a generic store would be
                     // ordered before every later shared-memory load it might alias)
  uint32_t k;        // K (a register copy, for the same reason as Image's)
  Image image;
};

// The common prologue of both kernels: the plan check (block 0), the checked-mode row rules
// (rank 0), the out_row routing and the unchecked clamps. Returns false when this CTA has nothing
// to write; a trivial row (len <= K) is written here by rank 0 and also returns false.
// Block-uniform.
__device__ bool begin_row(const KernelArgs& a, uint32_t& hash_word, RowJob& job) {
  const int32_t row = int32_t(blockIdx.x / uint32_t(a.cluster));
  const int rank = int(blockIdx.x % uint32_t(a.cluster));
  if (a.plan != nullptr && blockIdx.x == 0) check_plan(hash_word, a);
  if (row >= a.rows) return false;

  const bool report_errors = a.checked && rank == 0;
  const int32_t o_given = a.out_row != nullptr ? a.out_row[row] : row;
  const int32_t o = target_row(a, row, o_given, report_errors);
  const int32_t raw_len = a.len[row];
  const int32_t raw_base = a.col_base != nullptr ? a.col_base[row] : 0;
  if (report_errors) {  // every row's data is checked, written or not (as the reference)
    check_row(a, row, o_given >= 0 && o_given < a.out_rows ? o_given : -1, raw_len, raw_base);
  }
  if (o < 0) return false;
  // Unchecked neutralisation (also what runs after a checked-mode report): signed clamps.
  const int64_t base = min(max(int64_t{raw_base}, int64_t{0}), a.ld);
  job.len = min(max(int64_t{raw_len}, int64_t{0}), a.ld - base);
  job.src = a.logits + int64_t{row} * a.ld + base;
  job.image = Image{a.variant, 0, nullptr, a.page_table.width, a.page_table.num_pages};
  if (a.variant == TopkVariant::kRagged) job.image.offset = a.offset[row];
  if (a.variant == TopkVariant::kPaged) {
    const int32_t prow = a.row_page[o];
    // Out of range: the reserved row 0, whose entries are all page 0.
    const int64_t table_row = prow >= 0 && prow < a.page_table.num_rows ? prow : 0;
    job.image.table_row = a.page_table.data + table_row * a.page_table.width;
  }
  job.out = a.idx + int64_t{o} * a.k;
  job.k = uint32_t(a.k);
  if (job.len <= a.k) {  // trivial row: every visible position in ascending order, then -1
    if (rank == 0) {
      for (int32_t i = threadIdx.x; i < a.k; i += kThreads) {
        job.out[i] = i < job.len ? job.image(i) : -1;
      }
    }
    return false;
  }
  return true;
}

}  // namespace dsa::kernels::topk_detail
