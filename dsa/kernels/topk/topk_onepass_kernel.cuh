// The one-pass top-k kernel (SPEC.md §3e): each row is read from HBM once, into shared memory,
// and selected there.
//
// One CTA or one thread-block cluster of C CTAs (C = KernelArgs::cluster, a launch constant from
// R and ld) serves one row; each CTA holds a contiguous chunk of at most chunk_cap floats. Which
// of the two serves a row is decided on the device from the row's own length: len <= K is the
// trivial row (rank 0), a row that fits one CTA's chunk is selected by rank 0 alone, a longer one
// by every CTA of the cluster, which read each other's histograms through distributed shared
// memory. Grid: [R * C] CTAs, CTA b serves row b / C as rank b % C.
//
// A CTA's chunk arrives by bulk copies (the copy engine, all issued at once, completing on one
// mbarrier per 16 KB piece), so the whole chunk is in flight while the first pieces are counted.
// Selection (the §3e order: key larger = better, NaN lowest, -0 == +0, ties to the lower
// position):
//   pass 1  as the pieces land: histogram of a coarse digit, the top 11 bits of the value rounded
//           to fp16 (monotone in the order, and 32 bins per octave where the fp32 exponent digit
//           has 4, so far fewer keys share the K-th key's bin and far fewer atomics collide)
//           -> bin b1 holding the K-th key.
//   sweep   digit > b1: sure winners, written to idx at once; digit == b1: candidates (fp32 key
//           and chunk index) copied to a shared buffer, or, when more than kCandCap, re-read from
//           the chunk in every later step.
//   2, 3, 4 radix passes of 11, 11 and 10 bits of the fp32 key over the candidates -> the
//           threshold key T and the number of ties == T still needed.
//   final   candidates > T and the first ties in position order.
// Every output slot is assigned in position order: each warp owns a contiguous segment of the
// chunk (or of the candidate buffer, which is itself in position order), a counting sweep gives
// the per-warp offsets, and warp scans place each element; in a cluster the lower ranks' counts
// come from the histograms. So idx[0..K) is a pure function of the row: the positions of coarse
// digit > b1 ascending, then the selected positions of bin b1 ascending, whatever C, chunk_cap or
// whether the candidates fitted.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/topk/topk_device.cuh"

namespace dsa::kernels::topk_detail {

inline constexpr int kPieceFloats = 4096;  // one bulk copy and one mbarrier: 16 KB
inline constexpr int kOnePassCandCap = 4096;
inline constexpr int kMaxPieces = (kTopkMaxChunk + kPieceFloats - 1) / kPieceFloats;

struct OnePassSmem {
  uint64_t bar[kMaxPieces];
  uint32_t hist[2][kBins];  // ping-pong: a pass's histogram is cleared two passes later, after a
                            // row barrier every peer passed once its bin search was done
  uint32_t cand_key[kOnePassCandCap];
  uint32_t cand_idx[kOnePassCandCap];  // index into the chunk
  uint32_t warp_a[kWarps], warp_b[kWarps];
  unsigned long long scan64[kWarps];
  BinChoice choice;
  uint32_t hash;
};

inline constexpr size_t kOnePassHeaderBytes = (sizeof(OnePassSmem) + 127) / 128 * 128;

// Dynamic shared memory of a launch whose CTAs hold chunk_cap floats.
inline constexpr size_t onepass_smem_bytes(int32_t chunk_cap) {
  return kOnePassHeaderBytes + size_t(chunk_cap) * sizeof(float);
}
static_assert(onepass_smem_bytes(kTopkMaxChunk) <= 227 * 1024, "exceeds Hopper's shared memory");

// The coarse digit of pass 1: the top 11 bits of the order key of the value rounded to fp16.
// Rounding is monotone, so digit(a) > digit(b) implies a ranks above b; NaN -> 0 (lowest), and
// -0, +0 and every value that rounds to a zero share one digit.
__device__ __forceinline__ uint32_t coarse_digit(float v) {
  if (v != v) return 0u;
  const uint32_t h = __half_as_ushort(__float2half_rn(v));
  if ((h & 0x7FFFu) == 0u) return 0x8000u >> 5;
  return ((h & 0x8000u) ? (~h & 0xFFFFu) : (h | 0x8000u)) >> 5;
}

// This CTA's share of its row, in virtual columns (virtual column v is position v - shift; the
// shift aligns the first column to 16 bytes). The chunk holds [begin, begin + n4), of which
// [lo, hi) are the row's.
struct Span {
  const float* src;  // 16-byte aligned: virtual column 0
  uint32_t shift, begin, lo, hi, n4;
  __device__ __forceinline__ bool in(uint32_t i) const {  // chunk index i is a row position
    const uint32_t v = begin + i;
    return v >= lo && v < hi;
  }
  __device__ __forceinline__ int32_t pos(uint32_t i) const { return int32_t(begin + i - shift); }
};

// An ordered sweep over n elements in position order, kPer per lane, warp w owning the w-th of
// kWarps contiguous segments. classify(i) returns, for elements i .. i + kPer - 1, a mask with
// bit e set when element i + e is of class A and bit 4 + e when of class B. emit(i, mask, ra, rb)
// then runs with ra / rb the number of class A / B elements before element i in this CTA (in
// position order). Totals in tot_a / tot_b. Block-uniform (every thread calls it).
template <int kPer, typename Classify, typename Emit>
__device__ void ordered_sweep(OnePassSmem& s, uint32_t n, Classify classify, Emit emit,
                              uint32_t& tot_a, uint32_t& tot_b) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr uint32_t kStep = 32 * kPer;
  const uint32_t seg = ((n + kWarps - 1) / kWarps + kStep - 1) / kStep * kStep;
  const uint32_t w0 = min(n, warp * seg), w1 = min(n, w0 + seg);
  uint32_t ca = 0, cb = 0;
  for (uint32_t r = w0; r < w1; r += kStep) {
    const uint32_t i = r + kPer * lane;
    if (i < w1) {
      const uint32_t m = classify(i);
      ca += __popc(m & 0xFu);
      cb += __popc(m >> 4);
    }
  }
  ca = __reduce_add_sync(0xffffffffu, ca);
  cb = __reduce_add_sync(0xffffffffu, cb);
  if (lane == 0) {
    s.warp_a[warp] = ca;
    s.warp_b[warp] = cb;
  }
  __syncthreads();
  uint32_t ra = 0, rb = 0;
  tot_a = 0;
  tot_b = 0;
#pragma unroll
  for (int u = 0; u < kWarps; ++u) {
    const uint32_t a = s.warp_a[u], b = s.warp_b[u];
    ra += u < warp ? a : 0u;
    rb += u < warp ? b : 0u;
    tot_a += a;
    tot_b += b;
  }
  for (uint32_t r = w0; r < w1; r += kStep) {  // warp-uniform trip count
    const uint32_t i = r + kPer * lane;
    const uint32_t m = i < w1 ? classify(i) : 0u;
    const uint32_t packed = __popc(m & 0xFu) | (__popc(m >> 4) << 16);  // <= 128 each
    const uint32_t incl = warp_inclusive_scan(packed), excl = incl - packed;
    if (m != 0u) emit(i, m, ra + (excl & 0xFFFFu), rb + (excl >> 16));
    const uint32_t step_tot = __shfl_sync(0xffffffffu, incl, 31);
    ra += step_tot & 0xFFFFu;
    rb += step_tot >> 16;
  }
  __syncthreads();  // warp_a / warp_b are reused by the next sweep
}

// Adds the digit `digit(key)` of every candidate whose key satisfies `match` to hist: from the
// buffer when the candidates fitted, else from the chunk (coarse digit == b1).
template <typename Digit, typename Match>
__device__ void candidate_histogram(OnePassSmem& s, const float* chunk, const Span& sp,
                                    bool buffered, uint32_t n_cand, uint32_t b1, uint32_t* hist,
                                    Digit digit, Match match) {
  if (buffered) {
    for (uint32_t i = threadIdx.x; i < n_cand; i += kThreads) {
      const uint32_t key = s.cand_key[i];
      if (match(key)) atomicAdd(&hist[digit(key)], 1u);
    }
    return;
  }
  for (uint32_t i = 4 * threadIdx.x; i < sp.n4; i += 4 * kThreads) {
    const float4 x = *reinterpret_cast<const float4*>(chunk + i);
    const float v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (!sp.in(i + e) || coarse_digit(v[e]) != b1) continue;
      const uint32_t key = order_key(v[e]);
      if (match(key)) atomicAdd(&hist[digit(key)], 1u);
    }
  }
}

// Selects the K best positions of a row of len > K, this CTA being rank `rank` of n_coop.
__device__ void onepass_select_row(OnePassSmem& s, float* chunk, const KernelArgs& a,
                                   const RowJob& job, int n_coop, int rank) {
  const int tid = threadIdx.x;
  Span sp;
  sp.shift = uint32_t(reinterpret_cast<uintptr_t>(job.src) >> 2) & 3u;
  sp.src = job.src - sp.shift;
  const uint32_t vtotal = sp.shift + uint32_t(job.len);
  const uint32_t per = ((vtotal + n_coop - 1) / n_coop + 3) / 4 * 4;  // <= chunk_cap
  sp.begin = min(uint32_t(rank) * per, vtotal);
  sp.hi = min(sp.begin + per, vtotal);
  sp.lo = max(sp.begin, sp.shift);
  // Whole float4s: the last one ends at most at the row's round-up to 4 floats, inside ld.
  sp.n4 = (sp.hi - sp.begin + 3) / 4 * 4;
  const uint32_t pieces = (sp.n4 + kPieceFloats - 1) / kPieceFloats;

  if (tid == 0) {
    for (uint32_t i = 0; i < pieces; ++i) hopper::mbar_init(&s.bar[i], 1);
    hopper::fence_mbar_init();
    for (uint32_t i = 0; i < pieces; ++i) {
      const uint32_t bytes = min(uint32_t(kPieceFloats), sp.n4 - i * kPieceFloats) * 4u;
      hopper::mbar_arrive_expect_tx(&s.bar[i], bytes);
      hopper::bulk_load(chunk + i * kPieceFloats, sp.src + sp.begin + i * kPieceFloats, bytes,
                        &s.bar[i]);
    }
  }
  for (int i = tid; i < 2 * kBins; i += kThreads) (&s.hist[0][0])[i] = 0;
  __syncthreads();  // barriers initialised, histograms clear

  // Pass 1, piece by piece as the copies complete.
  for (uint32_t p = 0; p < pieces; ++p) {
    hopper::mbar_wait(&s.bar[p], 0);
    const uint32_t end = min(sp.n4, (p + 1) * kPieceFloats);
    for (uint32_t i = p * kPieceFloats + 4 * tid; i < end; i += 4 * kThreads) {
      const float4 x = *reinterpret_cast<const float4*>(chunk + i);
      const float v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (sp.in(i + e)) atomicAdd(&s.hist[0][coarse_digit(v[e])], 1u);
      }
    }
  }
  row_sync(n_coop);
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, uint32_t(a.k), n_coop, rank);
  const BinChoice c1 = s.choice;
  const uint32_t b1 = c1.bin;
  const uint32_t n_cand = s.hist[0][b1];  // this CTA's candidates
  const bool buffered = n_cand <= uint32_t(kOnePassCandCap);

  // Sure winners to idx, candidates to the buffer, both in position order.
  uint32_t n_sure = 0, n_cand_seen = 0;
  ordered_sweep<4>(
      s, sp.n4,
      [&](uint32_t i) {
        const float4 x = *reinterpret_cast<const float4*>(chunk + i);
        const float v[4] = {x.x, x.y, x.z, x.w};
        uint32_t m = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (!sp.in(i + e)) continue;
          const uint32_t d = coarse_digit(v[e]);
          m |= (d > b1 ? 1u : 0u) << e;
          m |= (d == b1 ? 1u : 0u) << (4 + e);
        }
        return m;
      },
      [&](uint32_t i, uint32_t m, uint32_t ra, uint32_t rb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if ((m >> e) & 1u) {
            const uint32_t slot = c1.above_low + ra++;
            if (slot < uint32_t(a.k)) job.out[slot] = job.image(sp.pos(i + e));
          } else if ((m >> (4 + e)) & 1u) {
            if (buffered) {
              s.cand_key[rb] = order_key(chunk[i + e]);
              s.cand_idx[rb] = i + e;
            }
            ++rb;
          }
        }
      },
      n_sure, n_cand_seen);

  // Passes 2-4 over the candidates' fp32 keys.
  const uint32_t k2 = uint32_t(a.k) - c1.above_tot;
  candidate_histogram(
      s, chunk, sp, buffered, n_cand, b1, s.hist[1], [](uint32_t key) { return key >> 21; },
      [](uint32_t) { return true; });
  row_sync(n_coop);
  find_bin<kBins>(s.hist[1], s.scan64, s.choice, k2, n_coop, rank);
  const BinChoice c2 = s.choice;
  const uint32_t k3 = k2 - c2.above_tot;

  for (int i = tid; i < kBins; i += kThreads) s.hist[0][i] = 0;
  __syncthreads();
  candidate_histogram(
      s, chunk, sp, buffered, n_cand, b1, s.hist[0],
      [](uint32_t key) { return (key >> 10) & 0x7FFu; },
      [&](uint32_t key) { return (key >> 21) == c2.bin; });
  row_sync(n_coop);
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, k3, n_coop, rank);
  const BinChoice c3 = s.choice;
  const uint32_t prefix22 = (c2.bin << 11) | c3.bin;
  const uint32_t k4 = k3 - c3.above_tot;

  for (int i = tid; i < kBins; i += kThreads) s.hist[1][i] = 0;
  __syncthreads();
  candidate_histogram(
      s, chunk, sp, buffered, n_cand, b1, s.hist[1], [](uint32_t key) { return key & 0x3FFu; },
      [&](uint32_t key) { return (key >> 10) == prefix22; });
  row_sync(n_coop);
  find_bin<kBins / 2>(s.hist[1], s.scan64, s.choice, k4, n_coop, rank);
  const BinChoice c4 = s.choice;
  const uint32_t threshold = (prefix22 << 10) | c4.bin;
  const uint32_t ties_needed = k4 - c4.above_tot;  // >= 1
  // Ties go to the lowest positions: the lower ranks take theirs first.
  const uint32_t ties_mine = ties_needed > c4.bin_low ? ties_needed - c4.bin_low : 0u;
  const uint32_t base = c1.above_tot + c2.above_low + c3.above_low + c4.above_low +
                        min(ties_needed, c4.bin_low);

  // Final: candidates > T (class A) and the first ties_mine ties == T (class B).
  auto place = [&](uint32_t key, uint32_t chunk_index, uint32_t& ra, uint32_t& rb) {
    if (key > threshold) {
      const uint32_t slot = base + ra + min(rb, ties_mine);
      if (slot < uint32_t(a.k)) job.out[slot] = job.image(sp.pos(chunk_index));
      ++ra;
    } else if (key == threshold) {
      if (rb < ties_mine) {
        const uint32_t slot = base + ra + rb;
        if (slot < uint32_t(a.k)) job.out[slot] = job.image(sp.pos(chunk_index));
      }
      ++rb;
    }
  };
  uint32_t n_above = 0, n_ties = 0;
  if (buffered) {
    ordered_sweep<1>(
        s, n_cand,
        [&](uint32_t i) {
          const uint32_t key = s.cand_key[i];
          return (key > threshold ? 1u : 0u) | (key == threshold ? 0x10u : 0u);
        },
        [&](uint32_t i, uint32_t, uint32_t ra, uint32_t rb) {
          place(s.cand_key[i], s.cand_idx[i], ra, rb);
        },
        n_above, n_ties);
  } else {
    ordered_sweep<4>(
        s, sp.n4,
        [&](uint32_t i) {
          const float4 x = *reinterpret_cast<const float4*>(chunk + i);
          const float v[4] = {x.x, x.y, x.z, x.w};
          uint32_t m = 0;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (!sp.in(i + e) || coarse_digit(v[e]) != b1) continue;
            const uint32_t key = order_key(v[e]);
            m |= (key > threshold ? 1u : 0u) << e;
            m |= (key == threshold ? 1u : 0u) << (4 + e);
          }
          return m;
        },
        [&](uint32_t i, uint32_t m, uint32_t ra, uint32_t rb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if ((m >> e) & 0x11u) place(order_key(chunk[i + e]), i + e, ra, rb);
          }
        },
        n_above, n_ties);
  }
  // No CTA may leave while a peer can still read its histograms.
  if (n_coop > 1) cg::this_cluster().sync();
}

__global__ void __launch_bounds__(kThreads, 1)
    topk_onepass_kernel(const __grid_constant__ KernelArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  OnePassSmem& s = *reinterpret_cast<OnePassSmem*>(smem_raw);
  float* chunk = reinterpret_cast<float*>(smem_raw + kOnePassHeaderBytes);
  RowJob job;
  if (!begin_row(a, s.hash, job)) return;
  const int rank = int(blockIdx.x % uint32_t(a.cluster));
  // One CTA when the row fits its chunk, else the whole cluster (the launch guarantees that
  // cluster * chunk_cap covers ld + 3 virtual columns).
  const uint64_t vtotal = (reinterpret_cast<uintptr_t>(job.src) >> 2 & 3u) + uint64_t(job.len);
  const int n_coop = vtotal <= uint64_t(a.chunk_cap) ? 1 : a.cluster;
  if (rank >= n_coop) return;
  onepass_select_row(s, chunk, a, job, n_coop, rank);
}

}  // namespace dsa::kernels::topk_detail
