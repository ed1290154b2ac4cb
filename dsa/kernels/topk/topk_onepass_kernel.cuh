// The one-pass top-k kernel (SPEC.md §3e): each row is read from HBM once, into shared memory,
// and selected there.
//
// One CTA or one thread-block cluster of C CTAs (C = KernelArgs::cluster, a launch constant from
// R and ld) serves one row; each CTA holds a contiguous chunk of at most chunk_cap floats. Which
// of the two serves a row is decided on the device from the row's own length: len <= K is the
// trivial row (rank 0), a row that fits one CTA's chunk is selected by rank 0 alone, a longer one
// by every CTA of the cluster, which read each other's shared memory (distributed shared memory).
// Grid: [R * C] CTAs, CTA b serves row b / C as rank b % C.
//
// A CTA's chunk arrives by bulk copies (the copy engine, all issued at once, completing on one
// mbarrier per 16 KB piece), so the whole chunk is in flight while the first pieces are counted.
// Selection (the §3e order: key larger = better, NaN lowest, -0 == +0, ties to the lower
// position):
//   pass 1    as the pieces land: histogram of a coarse digit, the top 11 bits of the value
//             rounded to fp16 (monotone in the order, and 32 bins per octave where the fp32
//             exponent digit has 4, so far fewer keys share the K-th key's bin and far fewer
//             atomics collide) -> bin b1 holding the K-th key.
//   classify  digit > b1: sure winners, written to idx at once; digit == b1: candidates (fp32 key
//             and chunk index) copied to a shared buffer when they fit.
//   select    the K-th key among the candidates by radix passes of 11, 11 and 10 bits of the fp32
//             key. Usually over all the row's candidates at once in every CTA (a cluster gathers
//             its peers' buffers, so no cluster barrier is needed until the end); when they are
//             too many, over the whole cluster's histograms, re-reading the chunks if a buffer
//             overflowed.
//   final     candidates > T and the first ties == T in position order.
// Every output slot is assigned in position order: each warp owns a contiguous segment of the
// chunk (or of a candidate buffer, itself in position order), a counting sweep gives the per-warp
// offsets, and warp ballots place each element; in a cluster the lower ranks' counts come from
// the histograms or the gathered candidates. So idx[0..K) is a pure function of the row: the
// positions of coarse digit > b1 ascending, then the selected positions of bin b1 ascending,
// whatever C, chunk_cap or whether the candidates fitted.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/topk/topk_device.cuh"

namespace dsa::kernels::topk_detail {

#ifdef DSA_TOPK_PROFILE  // phase clocks of block 0 (.scratch profiling only; off in every build)
__device__ unsigned long long g_topk_prof[16];
__device__ unsigned long long g_topk_span[2][4096];  // per block: entry, end of the selection
__device__ __forceinline__ void prof(int i) {
  if (threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (blockIdx.x == 0) g_topk_prof[i] = t;
    if ((i == 0 || i == 8) && blockIdx.x < 4096) g_topk_span[i == 8][blockIdx.x] = t;
  }
}
#else
__device__ __forceinline__ void prof(int) {}
#endif

inline constexpr int kPieceFloats = 4096;  // one bulk copy and one mbarrier: 16 KB
inline constexpr int kOnePassCandCap = 4096;
inline constexpr int kGatherCap = 4096;  // candidates of a whole row selected without the cluster
inline constexpr int kMaxPieces = (kTopkMaxChunk + kPieceFloats - 1) / kPieceFloats;
inline constexpr int kRound = 128;  // floats of one warp step of the classification (4 per lane)
inline constexpr int kMaxRounds = ((kTopkMaxChunk + kWarps - 1) / kWarps + kRound - 1) / kRound;

struct OnePassSmem {
  // Ping-pong: a pass's histogram is cleared two passes later, after a row barrier every peer
  // passed once its bin search was done. 16-byte aligned: peers read four bins at once.
  alignas(16) uint32_t hist[2][kBins];
  uint32_t cand_key[kOnePassCandCap];  // this CTA's candidates, in position order (read by peers)
  uint32_t cand_idx[kOnePassCandCap];  // their chunk indices
  uint32_t all_key[kGatherCap];        // a cluster's candidates, rank by rank, in position order
  uint32_t warp_a[kWarps], warp_b[kWarps];
  unsigned long long scan64[kWarps];
  BinChoice choice;
  uint32_t n_cand;  // this CTA's candidates (read by peers)
  uint32_t hash;
  uint64_t bar[kMaxPieces];
};

inline constexpr size_t kOnePassHeaderBytes = (sizeof(OnePassSmem) + 127) / 128 * 128;

// Dynamic shared memory of a launch whose CTAs hold chunk_cap floats.
inline constexpr size_t onepass_smem_bytes(int32_t chunk_cap) {
  return kOnePassHeaderBytes + size_t(chunk_cap) * sizeof(float);
}
static_assert(onepass_smem_bytes(kTopkMaxChunk) <= 227 * 1024, "exceeds Hopper's shared memory");
static_assert(kMaxRounds <= 32, "the classification keeps one byte per round in registers");

// The coarse digit of pass 1: the top 11 bits of the order key of the value rounded to fp16.
// Rounding is monotone, so digit(a) > digit(b) implies a ranks above b. NaN -> 0 (lowest); -0 is
// made +0 first (x + 0 = +0 for x = -0), so both zeros share a digit.
__device__ __forceinline__ uint32_t coarse_digit(float v) {
  const uint32_t h = __half_as_ushort(__float2half_rn(v + 0.0f));
  const uint32_t key = h ^ (0x8000u | ((0u - (h >> 15)) & 0x7FFFu));
  return v != v ? 0u : key >> 5;
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
  // Bit e set when chunk index i + e is a row position (i a multiple of 4).
  __device__ __forceinline__ uint32_t valid4(uint32_t i) const {
    const uint32_t v = begin + i;
    const uint32_t from = lo > v ? min(lo - v, 4u) : 0u, to = hi > v ? min(hi - v, 4u) : 0u;
    return ((1u << to) - 1u) & ~((1u << from) - 1u);
  }
  __device__ __forceinline__ int32_t pos(uint32_t i) const { return int32_t(begin + i - shift); }
};

__device__ __forceinline__ float4 load4(const float* chunk, uint32_t i) {
  return *reinterpret_cast<const float4*>(chunk + i);
}

// Bits e (digit > b1) and 4 + e (digit == b1) for chunk indices i .. i + 3.
__device__ __forceinline__ uint32_t classify4(const float* chunk, const Span& sp, uint32_t i,
                                              uint32_t b1) {
  const float4 x = load4(chunk, i);
  const float v[4] = {x.x, x.y, x.z, x.w};
  uint32_t m = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t d = coarse_digit(v[e]);
    m |= (d > b1 ? 1u : 0u) << e;
    m |= (d == b1 ? 1u : 0u) << (4 + e);
  }
  const uint32_t valid = sp.valid4(i);
  return m & (valid | (valid << 4));
}

// An ordered sweep over n elements in position order, one per lane, warp w owning the w-th of
// kWarps contiguous segments. classify(i) returns 1 (class A), 0x10 (class B) or 0. emit(i, ra, rb)
// then runs for every classified element with ra / rb the number of class A / B elements before
// it (in position order, this CTA). Block-uniform.
template <typename Classify, typename Emit>
__device__ void ordered_sweep(OnePassSmem& s, uint32_t n, Classify classify, Emit emit) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t seg = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
  const uint32_t w0 = min(n, warp * seg), w1 = min(n, w0 + seg);
  uint32_t ca = 0, cb = 0;
  for (uint32_t i = w0 + lane; i < w1; i += 32) {
    const uint32_t m = classify(i);
    ca += m & 1u;
    cb += m >> 4;
  }
  ca = __reduce_add_sync(0xffffffffu, ca);
  cb = __reduce_add_sync(0xffffffffu, cb);
  if (lane == 0) {
    s.warp_a[warp] = ca;
    s.warp_b[warp] = cb;
  }
  __syncthreads();
  uint32_t ra = 0, rb = 0;
#pragma unroll
  for (int u = 0; u < kWarps; ++u) {
    ra += u < warp ? s.warp_a[u] : 0u;
    rb += u < warp ? s.warp_b[u] : 0u;
  }
  const uint32_t below = (1u << lane) - 1u;
  for (uint32_t r = w0; r < w1; r += 32) {  // warp-uniform trip count
    const uint32_t i = r + lane;
    const uint32_t m = i < w1 ? classify(i) : 0u;
    const uint32_t ba = __ballot_sync(0xffffffffu, m & 1u), bb = __ballot_sync(0xffffffffu, m >> 4);
    if (m != 0u) emit(i, ra + __popc(ba & below), rb + __popc(bb & below));
    ra += __popc(ba);
    rb += __popc(bb);
  }
  __syncthreads();  // warp_a / warp_b are reused by the next sweep
}

// Classification of this CTA's chunk against b1, in position order: sure winners to idx from slot
// sure_base on, candidates to the buffer when `buffered`. Each warp keeps one byte of flags per
// 128-float round in registers, so the second sweep only re-reads the flagged elements.
__device__ void classify_chunk(OnePassSmem& s, const float* chunk, const Span& sp, uint32_t b1,
                               uint32_t sure_base, bool buffered, const KernelArgs& a,
                               const RowJob& job) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t seg = ((sp.n4 + kWarps - 1) / kWarps + kRound - 1) / kRound * kRound;
  const uint32_t w0 = min(sp.n4, warp * seg), w1 = min(sp.n4, w0 + seg);
  uint32_t flags[(kMaxRounds + 3) / 4] = {};
  uint32_t ns = 0, nc = 0;
#pragma unroll
  for (int r = 0; r < kMaxRounds; ++r) {
    const uint32_t i = w0 + r * kRound + 4 * lane;
    if (w0 + r * kRound < w1) {
      const uint32_t m = i < w1 ? classify4(chunk, sp, i, b1) : 0u;
      flags[r / 4] |= m << (8 * (r % 4));
      ns += __popc(m & 0xFu);
      nc += __popc(m >> 4);
    }
  }
  ns = __reduce_add_sync(0xffffffffu, ns);
  nc = __reduce_add_sync(0xffffffffu, nc);
  if (lane == 0) {
    s.warp_a[warp] = ns;
    s.warp_b[warp] = nc;
  }
  __syncthreads();
  uint32_t so = sure_base, co = 0;
#pragma unroll
  for (int u = 0; u < kWarps; ++u) {
    so += u < warp ? s.warp_a[u] : 0u;
    co += u < warp ? s.warp_b[u] : 0u;
  }
  const uint32_t below = (1u << lane) - 1u;
#pragma unroll
  for (int r = 0; r < kMaxRounds; ++r) {
    if (w0 + r * kRound >= w1) continue;  // warp-uniform
    const uint32_t m = (flags[r / 4] >> (8 * (r % 4))) & 0xFFu;
    uint32_t bs[4], bc[4], any = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      bs[e] = __ballot_sync(0xffffffffu, (m >> e) & 1u);
      bc[e] = __ballot_sync(0xffffffffu, (m >> (4 + e)) & 1u);
      any |= bs[e] | bc[e];
    }
    if (any == 0u) continue;
    uint32_t sr = so, cr = co;  // this lane's first slots
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sr += __popc(bs[e] & below);
      cr += __popc(bc[e] & below);
      so += __popc(bs[e]);
      co += __popc(bc[e]);
    }
    if (m == 0u) continue;
    const uint32_t i = w0 + r * kRound + 4 * lane;
    const float4 x = load4(chunk, i);
    const float v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if ((m >> e) & 1u) {
        if (sr < uint32_t(a.k)) job.out[sr] = job.image(sp.pos(i + e));
        ++sr;
      } else if ((m >> (4 + e)) & 1u) {
        if (buffered) {
          s.cand_key[cr] = order_key(v[e]);
          s.cand_idx[cr] = i + e;
        }
        ++cr;
      }
    }
  }
  __syncthreads();  // the buffer is complete; warp_a / warp_b free
}

// The threshold key among candidates and the ties it still needs.
struct Threshold {
  uint32_t key, ties_needed;
  BinChoice c2, c3, c4;  // the bins of passes 2-4 (their *_low fields: the lower ranks' counts)
};

// Passes 2-4 over n keys held in this CTA's shared memory (no cluster): the k2-th best key.
// hist[1] must be clear; hist[0] is cleared here.
__device__ Threshold select_local(OnePassSmem& s, const uint32_t* keys, uint32_t n, uint32_t k2) {
  const int tid = threadIdx.x;
  Threshold t;
  for (int i = tid; i < kBins; i += kThreads) s.hist[0][i] = 0;
  for (uint32_t j = tid; j < n; j += kThreads) atomicAdd(&s.hist[1][keys[j] >> 21], 1u);
  __syncthreads();
  find_bin<kBins>(s.hist[1], s.scan64, s.choice, k2, 1, 0);
  t.c2 = s.choice;
  const uint32_t k3 = k2 - t.c2.above_tot;
  for (uint32_t j = tid; j < n; j += kThreads) {
    const uint32_t key = keys[j];
    if ((key >> 21) == t.c2.bin) atomicAdd(&s.hist[0][(key >> 10) & 0x7FFu], 1u);
  }
  for (int i = tid; i < kBins; i += kThreads) s.hist[1][i] = 0;
  __syncthreads();
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, k3, 1, 0);
  t.c3 = s.choice;
  const uint32_t prefix22 = (t.c2.bin << 11) | t.c3.bin;
  const uint32_t k4 = k3 - t.c3.above_tot;
  for (uint32_t j = tid; j < n; j += kThreads) {
    const uint32_t key = keys[j];
    if ((key >> 10) == prefix22) atomicAdd(&s.hist[1][key & 0x3FFu], 1u);
  }
  __syncthreads();
  find_bin<kBins / 2>(s.hist[1], s.scan64, s.choice, k4, 1, 0);
  t.c4 = s.choice;
  t.key = (prefix22 << 10) | t.c4.bin;
  t.ties_needed = k4 - t.c4.above_tot;  // >= 1
  return t;
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
    const float4 x = load4(chunk, i);
    const float v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (!sp.in(i + e) || coarse_digit(v[e]) != b1) continue;
      const uint32_t key = order_key(v[e]);
      if (match(key)) atomicAdd(&hist[digit(key)], 1u);
    }
  }
}

// Passes 2-4 over the whole cluster's candidates by their histograms (peers' included), for rows
// whose candidates are too many to gather or overflowed a buffer. hist[1] must be clear.
__device__ Threshold select_cluster(OnePassSmem& s, const float* chunk, const Span& sp,
                                    bool buffered, uint32_t n_cand, uint32_t b1, uint32_t k2,
                                    int n_coop, int rank) {
  const int tid = threadIdx.x;
  Threshold t;
  candidate_histogram(
      s, chunk, sp, buffered, n_cand, b1, s.hist[1], [](uint32_t key) { return key >> 21; },
      [](uint32_t) { return true; });
  row_sync(n_coop);
  find_bin<kBins>(s.hist[1], s.scan64, s.choice, k2, n_coop, rank);
  t.c2 = s.choice;
  const uint32_t k3 = k2 - t.c2.above_tot;

  for (int i = tid; i < kBins; i += kThreads) s.hist[0][i] = 0;
  __syncthreads();
  candidate_histogram(
      s, chunk, sp, buffered, n_cand, b1, s.hist[0],
      [](uint32_t key) { return (key >> 10) & 0x7FFu; },
      [&](uint32_t key) { return (key >> 21) == t.c2.bin; });
  row_sync(n_coop);
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, k3, n_coop, rank);
  t.c3 = s.choice;
  const uint32_t prefix22 = (t.c2.bin << 11) | t.c3.bin;
  const uint32_t k4 = k3 - t.c3.above_tot;

  for (int i = tid; i < kBins; i += kThreads) s.hist[1][i] = 0;
  __syncthreads();
  candidate_histogram(
      s, chunk, sp, buffered, n_cand, b1, s.hist[1], [](uint32_t key) { return key & 0x3FFu; },
      [&](uint32_t key) { return (key >> 10) == prefix22; });
  row_sync(n_coop);
  find_bin<kBins / 2>(s.hist[1], s.scan64, s.choice, k4, n_coop, rank);
  t.c4 = s.choice;
  t.key = (prefix22 << 10) | t.c4.bin;
  t.ties_needed = k4 - t.c4.above_tot;
  return t;
}

// Writes candidate `chunk_index` (key `key`) if selected: class A (> T) takes slot
// base + ra + min(rb, ties), a tie takes base + ra + rb while rb < ties; ra / rb count the
// selected-class elements before it in position order.
__device__ __forceinline__ void place(const KernelArgs& a, const RowJob& job, const Span& sp,
                                      uint32_t key, uint32_t threshold, uint32_t chunk_index,
                                      uint32_t base, uint32_t ties, uint32_t ra, uint32_t rb) {
  uint32_t slot = UINT32_MAX;
  if (key > threshold) slot = base + ra + min(rb, ties);
  if (key == threshold && rb < ties) slot = base + ra + rb;
  if (slot < uint32_t(a.k)) job.out[slot] = job.image(sp.pos(chunk_index));
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

  if (tid == 0) {  // the barriers were initialised at kernel entry
    for (uint32_t i = 0; i < pieces; ++i) {
      const uint32_t bytes = min(uint32_t(kPieceFloats), sp.n4 - i * kPieceFloats) * 4u;
      hopper::mbar_arrive_expect_tx(&s.bar[i], bytes);
      hopper::bulk_load(chunk + i * kPieceFloats, sp.src + sp.begin + i * kPieceFloats, bytes,
                        &s.bar[i]);
    }
  }
  for (int i = tid; i < 2 * kBins; i += kThreads) (&s.hist[0][0])[i] = 0;
  __syncthreads();  // histograms clear
  prof(2);

  // Pass 1, piece by piece as the copies complete.
  for (uint32_t p = 0; p < pieces; ++p) {
    hopper::mbar_wait(&s.bar[p], 0);
    const uint32_t end = min(sp.n4, (p + 1) * kPieceFloats);
    for (uint32_t i = p * kPieceFloats + 4 * tid; i < end; i += 4 * kThreads) {
      const float4 x = load4(chunk, i);
      const float v[4] = {x.x, x.y, x.z, x.w};
      const uint32_t valid = sp.valid4(i);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if ((valid >> e) & 1u) atomicAdd(&s.hist[0][coarse_digit(v[e])], 1u);
      }
    }
  }
  prof(3);
  row_sync(n_coop);
  prof(4);
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, uint32_t(a.k), n_coop, rank);
  prof(5);
  const BinChoice c1 = s.choice;
  const uint32_t b1 = c1.bin;
  const uint32_t n_cand = s.hist[0][b1];  // this CTA's candidates
  const bool buffered = n_cand <= uint32_t(kOnePassCandCap);
  if (tid == 0) s.n_cand = n_cand;

  classify_chunk(s, chunk, sp, b1, c1.above_low, buffered, a, job);
  prof(6);

  const uint32_t k2 = uint32_t(a.k) - c1.above_tot;
  const uint32_t cand_base = c1.above_tot;  // the candidates' slots follow the sure winners'
  // Every candidate of the row in one CTA's shared memory: each CTA selects over all of them.
  const bool local = n_coop == 1 ? buffered : c1.bin_tot <= uint32_t(kGatherCap);
  if (local) {
    const uint32_t* keys = s.cand_key;
    uint32_t n = n_cand, my_first = 0;
    if (n_coop > 1) {
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // every peer's buffer and count are complete
      uint32_t off = 0;
      for (int c = 0; c < n_coop; ++c) {
        const uint32_t cnt = *cluster.map_shared_rank(&s.n_cand, c);
        const uint32_t* peer = cluster.map_shared_rank(s.cand_key, c);
        for (uint32_t j = tid; j < cnt; j += kThreads) s.all_key[off + j] = peer[j];
        off += cnt;
      }
      __syncthreads();
      keys = s.all_key;
      n = off;  // == c1.bin_tot
      my_first = c1.bin_low;
    }
    const Threshold t = select_local(s, keys, n, k2);
    prof(7);
    // Over the row's candidates in position order; this CTA writes its own [my_first, +n_cand).
    ordered_sweep(
        s, my_first + n_cand,
        [&](uint32_t j) {
          const uint32_t key = keys[j];
          return (key > t.key ? 1u : 0u) | (key == t.key ? 0x10u : 0u);
        },
        [&](uint32_t j, uint32_t ra, uint32_t rb) {
          if (j < my_first) return;
          place(a, job, sp, keys[j], t.key, s.cand_idx[j - my_first], cand_base, t.ties_needed, ra,
                rb);
        });
  } else {
    const Threshold t = select_cluster(s, chunk, sp, buffered, n_cand, b1, k2, n_coop, rank);
    prof(7);
    // Ties go to the lowest positions: the lower ranks take theirs first.
    const uint32_t ties_mine = t.ties_needed > t.c4.bin_low ? t.ties_needed - t.c4.bin_low : 0u;
    const uint32_t base = cand_base + t.c2.above_low + t.c3.above_low + t.c4.above_low +
                          min(t.ties_needed, t.c4.bin_low);
    if (buffered) {
      ordered_sweep(
          s, n_cand,
          [&](uint32_t i) {
            const uint32_t key = s.cand_key[i];
            return (key > t.key ? 1u : 0u) | (key == t.key ? 0x10u : 0u);
          },
          [&](uint32_t i, uint32_t ra, uint32_t rb) {
            place(a, job, sp, s.cand_key[i], t.key, s.cand_idx[i], base, ties_mine, ra, rb);
          });
    } else {  // in chunk order, one element per lane
      ordered_sweep(
          s, sp.n4,
          [&](uint32_t i) {
            const float v = chunk[i];
            if (!sp.in(i) || coarse_digit(v) != b1) return 0u;
            const uint32_t key = order_key(v);
            return (key > t.key ? 1u : 0u) | (key == t.key ? 0x10u : 0u);
          },
          [&](uint32_t i, uint32_t ra, uint32_t rb) {
            place(a, job, sp, order_key(chunk[i]), t.key, i, base, ties_mine, ra, rb);
          });
    }
  }
  prof(8);
  // No CTA may leave while a peer can still read its shared memory.
  if (n_coop > 1) cg::this_cluster().sync();
}

__global__ void __launch_bounds__(kThreads, 1)
    topk_onepass_kernel(const __grid_constant__ KernelArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  OnePassSmem& s = *reinterpret_cast<OnePassSmem*>(smem_raw);
  float* chunk = reinterpret_cast<float*>(smem_raw + kOnePassHeaderBytes);
  prof(0);
  if (threadIdx.x == 0) {  // early, so the fence overlaps the prologue's global reads
    for (int i = 0; i < kMaxPieces; ++i) hopper::mbar_init(&s.bar[i], 1);
    hopper::fence_mbar_init();
  }
  RowJob job;
  if (!begin_row(a, s.hash, job)) return;
  prof(1);
  const int rank = int(blockIdx.x % uint32_t(a.cluster));
  // One CTA when the row fits its chunk, else the whole cluster (the launch guarantees that
  // cluster * chunk_cap covers ld + 3 virtual columns).
  const uint64_t vtotal = (reinterpret_cast<uintptr_t>(job.src) >> 2 & 3u) + uint64_t(job.len);
  const int n_coop = vtotal <= uint64_t(a.chunk_cap) ? 1 : a.cluster;
  if (rank >= n_coop) return;
  onepass_select_row(s, chunk, a, job, n_coop, rank);
}

}  // namespace dsa::kernels::topk_detail
