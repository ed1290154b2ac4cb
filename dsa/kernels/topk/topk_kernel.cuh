// The top-k kernel (SPEC.md §3e): exact radix selection over order-preserving uint32 keys.
//
// One CTA (kThreads threads) or one thread-block cluster of kClusterSize CTAs serves one row r;
// which of the two is decided on the device from the row's own (neutralised) length: len <= K is
// the trivial row (rank 0 writes positions 0..len-1 then -1), K < len < long_row_min_len is
// selected by rank 0 alone, and len >= long_row_min_len by every CTA of the cluster, each owning a
// contiguous chunk of the row and reading its peers' histograms through distributed shared
// memory. Grid: [R * C] CTAs (C = 1 without clusters), CTA b serves row b / C as rank b % C.
//
// Selection of the K best keys of the row (the §3e order: key(v) larger = better, NaN lowest,
// -0 == +0, ties to the lower position) in three digit passes of 11, 11 and 10 bits:
//   pass 1  global read: histogram of the top digit           -> bin b1 holding the K-th key
//   pass 2  global read: keys above b1 are sure winners, written at once (in position order);
//           keys in b1 are candidates, copied to shared memory when they fit (else re-read),
//           and histogrammed on the second digit              -> bin b2
//   pass 3  over the candidates: histogram of the last digit  -> threshold T = (b1, b2, b3)
//   final   over the candidates in position order: keys > T, then the first (lowest-position)
//           ties == T still needed.
// Every output slot is assigned by block-wide prefix scans in position order (and, in a cluster,
// by the counts of the lower ranks), so idx[0..K) is a pure function of the row: the positions of
// top digit > b1 ascending, then the selected positions of bin b1 ascending. It does not depend on
// the cluster size, the chunking or whether the candidates fitted in shared memory.
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
inline constexpr int kBins = 2048;             // 11-bit digits (the last pass uses 1024 bins)
inline constexpr int kCandCap = 8192;          // candidates one CTA keeps in shared memory
inline constexpr int kClusterSize = 8;         // CTAs per long row (the portable maximum)
inline constexpr int kLoadUnroll = 4;          // float4 loads in flight per thread (histograms)
inline constexpr int kOrderedUnroll = 2;       // the same in the passes that scan in order
inline constexpr int kSubTile = 4 * kThreads;  // columns of one block-wide float4 sweep

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
  int32_t long_row_min_len;
  int32_t cluster;  // CTAs per row in the grid (1 or kClusterSize)
  bool checked;
  cuda::DeviceErrorWord* err;
};

// The bin that holds the K-th key of a pass, with the counts above it: over the whole row (tot)
// and over the lower ranks of the cluster only (low).
struct BinChoice {
  uint32_t bin, above_tot, above_low, bin_tot, bin_low;
};

struct Smem {
  uint32_t hist[3][kBins];  // this CTA's histogram of each pass (read by the cluster peers)
  uint32_t cand_key[kCandCap];
  int32_t cand_pos[kCandCap];
  unsigned long long scan64[kWarps];
  uint32_t scan32[kWarps];
  BinChoice choice;
  uint32_t hash;
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

// Turns a position of a row into its idx entry (unchecked neutralisation done). One register of
// row state; the rest is read from the kernel parameters (constant bank).
struct Image {
  const KernelArgs* a;
  int32_t row_word;  // kPaged: the page-table row (0 when row_page was out of range); kRagged:
                     // the offset
  __device__ __forceinline__ int32_t operator()(int32_t p) const {
    if (a->variant == TopkVariant::kPaged) {
      const int32_t j = p / kPageSize;
      int32_t id = j < a->page_table.width
                       ? a->page_table.data[int64_t{row_word} * a->page_table.width + j]
                       : 0;
      if (id < 0 || id >= a->page_table.num_pages) id = 0;
      return id * kPageSize + p % kPageSize;
    }
    if (a->variant == TopkVariant::kRagged) {
      return static_cast<int32_t>(uint32_t(row_word) + uint32_t(p));
    }
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

// ---- one CTA's share of a row ----------------------------------------------------------------

// Virtual columns fit in uint32: they are below shift + len <= 3 + INT32_MAX.
struct Chunk {
  const float* src;  // 16-byte aligned; virtual column v holds position v - shift
  uint32_t shift;    // 0..3: misalignment of the row's first column
  uint32_t lo, hi;   // this CTA's valid virtual columns [lo, hi)
  uint32_t begin;    // first virtual column of the chunk (a multiple of 4)
};

// Calls f(x, v) for every float4 of the chunk, x holding virtual columns v..v+3 (v = a multiple
// of 4; columns outside [lo, hi) are garbage and must be masked by f). Block-uniform: every thread
// makes the same number of calls, so f may use barriers.
template <int U = kLoadUnroll, typename F>
__device__ __forceinline__ void sweep(const Chunk& c, F&& f) {
  for (uint32_t g = c.begin; g < c.hi; g += uint32_t{kSubTile} * U) {
    float4 x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t v = g + u * kSubTile + 4 * threadIdx.x;
      x[u] = v < c.hi ? __ldg(reinterpret_cast<const float4*>(c.src + v))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) f(x[u], g + u * kSubTile + 4 * threadIdx.x);
  }
}

__device__ __forceinline__ float lane_of(const float4& x, int e) {
  return e == 0 ? x.x : e == 1 ? x.y : e == 2 ? x.z : x.w;
}

// kPer consecutive histogram words [first, first + kPer) of cluster rank `rank`'s copy of `hist`
// (kPer = 2 or 4, first a multiple of kPer): one distributed-shared-memory vector load.
template <int kPer>
__device__ __forceinline__ void load_peer_bins(const uint32_t* hist, int first, uint32_t rank,
                                               uint32_t (&v)[kPer]) {
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(hist + first));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  if constexpr (kPer == 4) {
    asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(remote)
                 : "memory");
  } else {
    static_assert(kPer == 2);
    asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v[0]), "=r"(v[1])
                 : "r"(remote)
                 : "memory");
  }
}

// Finds the bin of pass `pass` (NB bins) holding the krem-th best key, summing the histograms of
// the n_coop CTAs of the row (the lower ranks' share kept apart). Result in s.choice, for every
// thread. Thread t owns the kPer bins just below NB - kPer * t, so a scan in thread order counts
// the keys of higher bins.
template <int NB>
__device__ void find_bin(Smem& s, int pass, uint32_t krem, int n_coop, int rank) {
  constexpr int kPer = NB / kThreads;
  const int first = NB - kPer * (int(threadIdx.x) + 1);
  uint32_t tot[kPer], low[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    tot[i] = s.hist[pass][first + i];
    low[i] = 0;
  }
  if (n_coop > 1) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) tot[i] = 0;
    for (int c = 0; c < n_coop; ++c) {
      uint32_t v[kPer];
      load_peer_bins<kPer>(s.hist[pass], first, uint32_t(c), v);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        tot[i] += v[i];
        low[i] += c < rank ? v[i] : 0u;
      }
    }
  }
  unsigned long long sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) sum += (static_cast<unsigned long long>(tot[i]) << 32) | low[i];
  unsigned long long all;
  const unsigned long long excl = block_exclusive_scan(sum, all, s.scan64);
  uint32_t above_tot = uint32_t(excl >> 32), above_low = uint32_t(excl);
#pragma unroll
  for (int i = kPer - 1; i >= 0; --i) {  // descending bins
    if (above_tot < krem && above_tot + tot[i] >= krem) {
      s.choice = {uint32_t(first + i), above_tot, above_low, tot[i], low[i]};
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

// Selects the K best positions of a row of len > K, this CTA being rank `rank` of n_coop.
__device__ void select_row(Smem& s, const KernelArgs& a, const float* row_src, int64_t len,
                           int32_t* out, const Image& image, int n_coop, int rank) {
  const int tid = threadIdx.x;
  // Chunks in virtual columns, whole sub-tiles each.
  const uint32_t shift = uint32_t(reinterpret_cast<uintptr_t>(row_src) >> 2) & 3u;
  const uint32_t vtotal = shift + uint32_t(len);
  uint32_t chunk = (vtotal + n_coop - 1) / n_coop;
  chunk = (chunk + kSubTile - 1) / kSubTile * kSubTile;
  Chunk c;
  c.src = row_src - shift;
  c.shift = shift;
  c.begin = uint32_t(min(uint64_t{uint32_t(rank)} * chunk, uint64_t{vtotal}));
  c.hi = uint32_t(min(uint64_t{c.begin} + chunk, uint64_t{vtotal}));
  c.lo = max(c.begin, shift);

  for (int i = tid; i < 3 * kBins; i += kThreads) (&s.hist[0][0])[i] = 0;
  __syncthreads();

  // Pass 1: top digit.
  sweep(c, [&](const float4& x, uint32_t v) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (v + e >= c.lo && v + e < c.hi) atomicAdd(&s.hist[0][order_key(lane_of(x, e)) >> 21], 1u);
    }
  });
  row_sync(n_coop);
  find_bin<kBins>(s, 0, uint32_t(a.k), n_coop, rank);
  const BinChoice c1 = s.choice;
  const uint32_t b1 = c1.bin;
  const uint32_t k2 = uint32_t(a.k) - c1.above_tot;
  const uint32_t local_cand = s.hist[0][b1];
  const bool buffered = local_cand <= uint32_t(kCandCap);

  // Pass 2: sure winners out, candidates in, second digit of the candidates.
  uint32_t sure_run = 0, cand_run = 0;
  sweep<kOrderedUnroll>(c, [&](const float4& x, uint32_t v) {
    uint32_t key[4], sure = 0, cand = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      key[e] = order_key(lane_of(x, e));
      const bool in = v + e >= c.lo && v + e < c.hi;
      const uint32_t d = key[e] >> 21;
      sure += (in && d > b1) ? 1u : 0u;
      if (in && d == b1) {
        ++cand;
        atomicAdd(&s.hist[1][(key[e] >> 10) & 0x7FF], 1u);
      }
    }
    uint32_t total;
    const uint32_t excl = block_exclusive_scan(sure | (cand << 16), total, s.scan32);
    uint32_t so = c1.above_low + sure_run + (excl & 0xFFFF), co = cand_run + (excl >> 16);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (!(v + e >= c.lo && v + e < c.hi)) continue;
      const uint32_t d = key[e] >> 21;
      const int32_t p = int32_t(v + e - c.shift);
      if (d > b1) {
        if (so < uint32_t(a.k)) out[so] = image(p);
        ++so;
      } else if (d == b1) {
        if (buffered && co < uint32_t(kCandCap)) {
          s.cand_key[co] = key[e];
          s.cand_pos[co] = p;
        }
        ++co;
      }
    }
    sure_run += total & 0xFFFF;
    cand_run += total >> 16;
  });
  row_sync(n_coop);
  find_bin<kBins>(s, 1, k2, n_coop, rank);
  const BinChoice c2 = s.choice;
  const uint32_t prefix22 = (b1 << 11) | c2.bin;
  const uint32_t k3 = k2 - c2.above_tot;

  // Pass 3: last digit of the keys sharing the top 22 bits.
  if (buffered) {
    for (uint32_t i = tid; i < local_cand; i += kThreads) {
      const uint32_t key = s.cand_key[i];
      if ((key >> 10) == prefix22) atomicAdd(&s.hist[2][key & 0x3FF], 1u);
    }
  } else {
    sweep(c, [&](const float4& x, uint32_t v) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t key = order_key(lane_of(x, e));
        if (v + e >= c.lo && v + e < c.hi && (key >> 10) == prefix22) {
          atomicAdd(&s.hist[2][key & 0x3FF], 1u);
        }
      }
    });
  }
  row_sync(n_coop);
  find_bin<kBins / 2>(s, 2, k3, n_coop, rank);
  const BinChoice c3 = s.choice;
  const uint32_t threshold = (prefix22 << 10) | c3.bin;
  const uint32_t ties_needed = k3 - c3.above_tot;  // >= 1
  // Ties go to the lowest positions: the lower ranks take theirs first.
  const uint32_t ties_mine = ties_needed > c3.bin_low ? ties_needed - c3.bin_low : 0u;
  const uint32_t cand_base =
      c1.above_tot + c2.above_low + c3.above_low + min(ties_needed, c3.bin_low);

  // Final: candidates > T and the first ties_mine ties, in position order.
  uint32_t taken_run = 0, ties_run = 0;
  auto emit = [&](const uint32_t(&key)[4], const int32_t(&pos)[4], const bool(&in)[4]) {
    uint32_t above = 0, tie = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      above += (in[e] && key[e] > threshold) ? 1u : 0u;
      tie += (in[e] && key[e] == threshold) ? 1u : 0u;
    }
    uint32_t total;
    const uint32_t excl = block_exclusive_scan(above | (tie << 16), total, s.scan32);
    const uint32_t rem = ties_mine > ties_run ? ties_mine - ties_run : 0u;
    uint32_t a_before = excl & 0xFFFF, t_before = excl >> 16;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (!in[e]) continue;
      const bool is_above = key[e] > threshold, is_tie = key[e] == threshold;
      if (is_above || (is_tie && t_before < rem)) {
        const uint32_t o = cand_base + taken_run + a_before + min(t_before, rem);
        if (o < uint32_t(a.k)) out[o] = image(pos[e]);
      }
      a_before += is_above ? 1u : 0u;
      t_before += is_tie ? 1u : 0u;
    }
    taken_run += (total & 0xFFFF) + min(total >> 16, rem);
    ties_run += total >> 16;
  };
  if (buffered) {  // four consecutive candidates per thread keep the scan in position order
    for (uint32_t i0 = 0; i0 < local_cand; i0 += 4 * kThreads) {
      uint32_t key[4];
      int32_t pos[4];
      bool in[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t i = i0 + 4 * tid + e;
        in[e] = i < local_cand;
        key[e] = in[e] ? s.cand_key[i] : 0u;
        pos[e] = in[e] ? s.cand_pos[i] : 0;
      }
      emit(key, pos, in);
    }
  } else {
    sweep<kOrderedUnroll>(c, [&](const float4& x, uint32_t v) {
      uint32_t key[4];
      int32_t pos[4];
      bool in[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        key[e] = order_key(lane_of(x, e));
        pos[e] = int32_t(v + e - c.shift);
        in[e] = v + e >= c.lo && v + e < c.hi && (key[e] >> 21) == b1;
      }
      emit(key, pos, in);
    });
  }
  // No CTA may leave while a peer can still read its histograms.
  if (n_coop > 1) cg::this_cluster().sync();
}

// ---- checks and neutralisation ---------------------------------------------------------------

__device__ __forceinline__ void report(const KernelArgs& a, StatusCode code, int32_t row,
                                       int32_t value) {
  cuda::report_device_error(a.err, code, cuda::OpId::kTopk, row, value);
}

// Plan header (§3e): magic, R and K always; the length hash in checked mode. Block-uniform.
__device__ void check_plan(Smem& s, const KernelArgs& a) {
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
  if (threadIdx.x == 0) s.hash = 0;
  __syncthreads();
  uint32_t part = 0;  // the §3c sum wraps mod 2^32, so any summation order gives the same bits
  for (int32_t r = threadIdx.x; r < a.rows; r += kThreads) {
    part += uint32_t(a.len[r]) * uint32_t(2 * int64_t{r} + 1);
  }
  atomicAdd(&s.hash, part);
  __syncthreads();
  if (threadIdx.x == 0 && s.hash != h.len_hash) {
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

__global__ void __launch_bounds__(kThreads, 2) topk_kernel(const __grid_constant__ KernelArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int32_t row = int32_t(blockIdx.x / uint32_t(a.cluster));
  const int rank = int(blockIdx.x % uint32_t(a.cluster));
  if (a.plan != nullptr && blockIdx.x == 0) check_plan(s, a);
  if (row >= a.rows) return;

  const bool report_errors = a.checked && rank == 0;
  const int32_t o_given = a.out_row != nullptr ? a.out_row[row] : row;
  const int32_t o = target_row(a, row, o_given, report_errors);
  const int32_t raw_len = a.len[row];
  const int32_t raw_base = a.col_base != nullptr ? a.col_base[row] : 0;
  if (report_errors) {  // every row's data is checked, written or not (as the reference)
    check_row(a, row, o_given >= 0 && o_given < a.out_rows ? o_given : -1, raw_len, raw_base);
  }
  if (o < 0) return;
  // Unchecked neutralisation (also what runs after a checked-mode report): signed clamps.
  const int64_t base = min(max(int64_t{raw_base}, int64_t{0}), a.ld);
  const int64_t len = min(max(int64_t{raw_len}, int64_t{0}), a.ld - base);

  Image image{&a, 0};
  if (a.variant == TopkVariant::kRagged) image.row_word = a.offset[row];
  if (a.variant == TopkVariant::kPaged) {
    const int32_t prow = a.row_page[o];
    // Out of range: the reserved row 0, whose entries are all page 0.
    image.row_word = prow >= 0 && prow < a.page_table.num_rows ? prow : 0;
  }
  int32_t* out = a.idx + int64_t{o} * a.k;

  if (len <= a.k) {  // trivial row: every visible position in ascending order, then -1
    if (rank != 0) return;
    for (int32_t i = threadIdx.x; i < a.k; i += kThreads) out[i] = i < len ? image(i) : -1;
    return;
  }
  const int n_coop = (a.cluster > 1 && len >= a.long_row_min_len) ? a.cluster : 1;
  if (rank >= n_coop) return;
  select_row(s, a, a.logits + int64_t{row} * a.ld + base, len, out, image, n_coop, rank);
}

}  // namespace dsa::kernels::topk_detail
