// The streaming top-k kernel (SPEC.md §3e): for rows wider than a cluster's shared memory holds
// (ld > kClusterSize * TopkParams::max_chunk), for many wide rows (TopkParams::stream_min_rows),
// and where a cluster cannot be placed; every other launch takes topk_onepass_kernel.cuh. Exact
// radix selection over order-preserving uint32 keys, re-reading the row from global memory.
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

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/cuda/pdl.h"
#include "dsa/kernels/topk/topk_device.cuh"

namespace dsa::kernels::topk_detail {

inline constexpr int kCandCap = 8192;          // candidates one CTA keeps in shared memory
inline constexpr int kLoadUnroll = 4;          // float4 loads in flight per thread (histograms)
inline constexpr int kOrderedUnroll = 2;       // the same in the passes that scan in order
inline constexpr int kSubTile = 4 * kThreads;  // columns of one block-wide float4 sweep

// The image through the kernel parameters (two registers of row state), as this kernel was tuned
// for: it keeps the kernel at 64 registers, two CTAs per SM.
struct ParamImage {
  const KernelArgs* a;
  int32_t row_word;  // kPaged: the page-table row (0 when out of range); kRagged: the offset
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

struct StreamSmem {
  uint32_t hist[3][kBins];  // this CTA's histogram of each pass (read by the cluster peers)
  uint32_t cand_key[kCandCap];
  int32_t cand_pos[kCandCap];
  unsigned long long scan64[kWarps];
  uint32_t scan32[kWarps];
  BinChoice choice;
  uint32_t hash;
};

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

// Selects the K best positions of a row of len > K, this CTA being rank `rank` of n_coop.
__device__ void stream_select_row(StreamSmem& s, const KernelArgs& a, const float* row_src,
                                  int64_t len, int32_t* out, const ParamImage& image, int n_coop,
                                  int rank) {
  const int tid = threadIdx.x;
  const uint32_t k = uint32_t(a.k);
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
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, k, n_coop, rank);
  const BinChoice c1 = s.choice;
  const uint32_t b1 = c1.bin;
  const uint32_t k2 = k - c1.above_tot;
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
        if (so < k) out[so] = image(p);
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
  find_bin<kBins>(s.hist[1], s.scan64, s.choice, k2, n_coop, rank);
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
  find_bin<kBins / 2>(s.hist[2], s.scan64, s.choice, k3, n_coop, rank);
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
        if (o < k) out[o] = image(pos[e]);
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

__global__ void __launch_bounds__(kThreads, 2)
    topk_stream_kernel(const __grid_constant__ KernelArgs a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  StreamSmem& s = *reinterpret_cast<StreamSmem*>(smem_raw);
  RowJob job;
  if (!begin_row(a, s.hash, job)) return;
  const int rank = int(blockIdx.x % uint32_t(a.cluster));
  const int n_coop = (a.cluster > 1 && job.len >= a.long_row_min_len) ? a.cluster : 1;
  if (rank >= n_coop) return;
  int32_t row_word = job.image.offset;
  if (a.variant == TopkVariant::kPaged) {
    row_word = int32_t((job.image.table_row - a.page_table.data) / a.page_table.width);
  }
  stream_select_row(s, a, job.src, job.len, job.out, ParamImage{&a, row_word}, n_coop, rank);
}

}  // namespace dsa::kernels::topk_detail
