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
//   pass 1    as the pieces land: each value becomes its 16-bit key, the order key of the value
//             rounded to fp16 (monotone in the order), compacted in place over the floats
//             already read, and the top 11 bits of that key (32 bins per octave, where the fp32
//             exponent digit has 4: far fewer keys share the K-th key's bin, and far fewer
//             atomics collide) are histogrammed -> bin b1 holding the K-th key.
//   classify  over the 16-bit keys (a shift and two compares each): digit > b1 are sure
//             winners, written to idx at once; digit == b1 are candidates, whose chunk indices
//             go to a shared buffer and whose fp32 keys are then fetched from the row in global
//             memory (just read, so in L2) all at once.
//   select    the k2-th best candidate: by direct ranks (each candidate counts the candidates
//             above it) when the row has at most kRankSelectMax, else by radix passes of 11, 11
//             and 10 bits of the fp32 key. A cluster first gathers its peers' candidates, so
//             every CTA selects over all of them with no cluster barrier until the end; with too
//             many candidates (or a buffer overflowed) the cluster's histograms are summed
//             instead, re-reading the candidates' values from global memory.
//   final     the selected candidates.
// Every output slot is a pure function of the row: sure winners in position order (each warp owns
// a contiguous segment of the chunk, a counting sweep gives the per-warp offsets, warp scans place
// each element; in a cluster the lower ranks' counts come from the histograms), then the selected
// candidates, by rank when ranked directly, else in position order. So the output does not depend
// on C, chunk_cap or whether the candidates fitted.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/topk/topk_device.cuh"

namespace dsa::kernels::topk_detail {

#ifdef DSA_TOPK_PROFILE  // phase clocks for tools/topk_phase_profile.cu; off in every build
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

inline constexpr int kPieceFloats = 4096;     // one bulk copy and one mbarrier: 16 KB
inline constexpr int kOnePassCandCap = 2048;  // candidates one CTA buffers
inline constexpr int kGatherCap = 2048;       // candidates of a cluster's row gathered per CTA
inline constexpr int kRankSelectMax = 128;    // candidates ranked directly (else radix passes)
inline constexpr int kMaxPieces = (kTopkMaxChunk + kPieceFloats - 1) / kPieceFloats;
inline constexpr int kRound = 128;  // elements of one warp step of the classification (4 a lane)

struct OnePassSmem {
  // Ping-pong: a pass's histogram is cleared two passes later, after a row barrier every peer
  // passed once its bin search was done. 16-byte aligned: peers read four bins at once.
  alignas(16) uint32_t hist[2][kBins];
  uint32_t cand_idx[kOnePassCandCap];              // this CTA's candidates' chunk indices
  alignas(16) uint32_t cand_key[kOnePassCandCap];  // their fp32 keys, position order
  alignas(16) uint32_t all_key[kGatherCap];        // a cluster's candidates, rank by rank
  // cand_key and all_key hold the classification's flags (one byte per float4) before that.
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
static_assert(offsetof(OnePassSmem, all_key) ==
                      offsetof(OnePassSmem, cand_key) + 4 * kOnePassCandCap &&
                  4 * (kOnePassCandCap + kGatherCap) >= kTopkMaxChunk / 4,
              "the classification flags fill cand_key and all_key");

// The 16-bit key of pass 1: the order key of the value rounded to fp16. Rounding is monotone, so
// key16(a) > key16(b) implies a ranks above b. NaN -> 0 (lowest); -0 is made +0 first
// (x + 0 = +0 for x = -0), so both zeros share a key.
__device__ __forceinline__ uint32_t key16(float v) {
  const uint32_t h = __half_as_ushort(__float2half_rn(v + 0.0f));
  const uint32_t key = h ^ (0x8000u | ((0u - (h >> 15)) & 0x7FFFu));
  return v != v ? 0u : key;
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
    if (v >= lo && v + 4 <= hi) return 0xFu;  // all but the chunk's first and last float4
    const uint32_t from = lo > v ? min(lo - v, 4u) : 0u, to = hi > v ? min(hi - v, 4u) : 0u;
    return ((1u << to) - 1u) & ~((1u << from) - 1u);
  }
  __device__ __forceinline__ int32_t pos(uint32_t i) const { return int32_t(begin + i - shift); }
  // The fp32 order key of chunk index i, from the row in global memory.
  __device__ __forceinline__ uint32_t full_key(uint32_t i) const {
    return order_key(__ldg(src + begin + i));
  }
};

// Bits e (digit > b1) and 4 + e (digit == b1) for the 16-bit keys of chunk indices i .. i + 3.
__device__ __forceinline__ uint32_t classify4(const uint16_t* keys, const Span& sp, uint32_t i,
                                              uint32_t b1) {
  const uint2 w = *reinterpret_cast<const uint2*>(keys + i);
  const uint32_t k[4] = {w.x & 0xFFFFu, w.x >> 16, w.y & 0xFFFFu, w.y >> 16};
  uint32_t m = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t d = k[e] >> 5;
    m |= (d > b1 ? 1u : 0u) << e;
    m |= (d == b1 ? 1u : 0u) << (4 + e);
  }
  const uint32_t valid = sp.valid4(i);
  return m & (valid | (valid << 4));
}

// Two per-lane counts summed over the warp, then over the lower warps of the CTA: the warp's
// offsets in position order (warp w's segment follows the lower warps'). One barrier; warp_a /
// warp_b stay in use until the caller's next barrier.
__device__ __forceinline__ void lower_warp_counts(OnePassSmem& s, uint32_t a, uint32_t b,
                                                  uint32_t& below_a, uint32_t& below_b) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = __reduce_add_sync(0xffffffffu, a);
  b = __reduce_add_sync(0xffffffffu, b);
  if (lane == 0) {
    s.warp_a[warp] = a;
    s.warp_b[warp] = b;
  }
  __syncthreads();
  for (int u = 0; u < warp; ++u) {
    below_a += s.warp_a[u];
    below_b += s.warp_b[u];
  }
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
  uint32_t ra = 0, rb = 0;
  lower_warp_counts(s, ca, cb, ra, rb);
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
// sure_base on, candidates' chunk indices to the buffer when `buffered`. Rolled loops on purpose:
// the kernel is code-bound (every instruction runs a few times per CTA; unrolled rounds spent
// half their time waiting for instruction fetch), and a classification costs a few instructions.
template <TopkVariant V>
__device__ void classify_chunk(OnePassSmem& s, const uint16_t* keys, const Span& sp, uint32_t b1,
                               uint32_t sure_base, bool buffered, const RowJob& job) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t seg = ((sp.n4 + kWarps - 1) / kWarps + kRound - 1) / kRound * kRound;
  const uint32_t w0 = min(sp.n4, warp * seg), w1 = min(sp.n4, w0 + seg);
  uint8_t* flags = reinterpret_cast<uint8_t*>(s.cand_key);  // one byte per float4
  uint32_t ns = 0, nc = 0;
#pragma unroll 2
  for (uint32_t i = w0 + 4 * lane; i < w1; i += kRound) {
    const uint32_t m = classify4(keys, sp, i, b1);
    flags[i / 4] = uint8_t(m);
    ns += __popc(m & 0xFu);
    nc += __popc(m >> 4);
  }
  uint32_t so = 0, co = 0;
  lower_warp_counts(s, ns, nc, so, co);
  so += sure_base;
#pragma unroll 2
  for (uint32_t r = w0; r < w1; r += kRound) {  // warp-uniform trip count
    const uint32_t i = r + 4 * lane;
    const uint32_t m = i < w1 ? flags[i / 4] : 0u;
    // Position order inside the round is lane-major: a lane's first slots follow the flagged
    // elements of the lower lanes.
    const uint32_t packed = __popc(m & 0xFu) | (__popc(m >> 4) << 16);
    const uint32_t incl = warp_inclusive_scan(packed);
    const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
    uint32_t sr = so + ((incl - packed) & 0xFFFFu), cr = co + ((incl - packed) >> 16);
    so += total & 0xFFFFu;
    co += total >> 16;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool sure = (m >> e) & 1u, cand = (m >> (4 + e)) & 1u;
      if constexpr (V == TopkVariant::kPaged) {  // the image reads the page table: when needed
        if (sure && sr < job.k) __stcg(job.out + sr, job.image.map<V>(sp.pos(i + e)));
      } else {  // arithmetic images: predicated stores, no branches
        const int32_t img = job.image.map<V>(sp.pos(i + e));
        if (sure && sr < job.k) __stcg(job.out + sr, img);
      }
      if (cand && buffered) s.cand_idx[cr] = i + e;
      sr += sure ? 1u : 0u;
      cr += cand ? 1u : 0u;
    }
  }
  __syncthreads();  // the indices are complete; warp_a / warp_b and the flags free
}

// Where the radix passes read the candidates: fp32 keys in shared memory (this CTA's buffer or a
// cluster's gathered candidates), or, for a buffer that overflowed, every chunk index whose
// 16-bit key is in bin b1, its fp32 key fetched from global memory.
struct Candidates {
  const uint32_t* keys;  // null: from the chunk
  uint32_t n;            // keys in `keys`
  const uint16_t* keys16;
  Span sp;
  uint32_t b1;
};

// Adds digit (key >> dshift) & dmask of every candidate with key >> mshift == prefix (mshift 32:
// every candidate) to hist.
__device__ void candidate_histogram(const Candidates& c, uint32_t* hist, int dshift, uint32_t dmask,
                                    int mshift, uint32_t prefix) {
  auto add = [&](uint32_t key) {
    if ((uint64_t{key} >> mshift) == prefix) atomicAdd(&hist[(key >> dshift) & dmask], 1u);
  };
  if (c.keys != nullptr) {
    for (uint32_t j = threadIdx.x; j < c.n; j += kThreads) add(c.keys[j]);
    return;
  }
  for (uint32_t i = threadIdx.x; i < c.sp.n4; i += kThreads) {
    if (c.sp.in(i) && (uint32_t{c.keys16[i]} >> 5) == c.b1) add(c.sp.full_key(i));
  }
}

// The threshold key among candidates and the ties it still needs.
struct Threshold {
  uint32_t key, ties_needed;
  BinChoice last;      // the bin of pass 4
  uint32_t above_low;  // candidates above the threshold in the lower ranks (passes 2-4)
};

// Passes 2-4 (11, 11 and 10 bits of the fp32 key): the k2-th best candidate. n_coop > 1 sums the
// cluster's histograms (every rank passes its own share of the candidates); n_coop = 1 counts
// this CTA's candidates only (its own, or a cluster's gathered ones). hist[1] must be clear;
// hist[0] is cleared once no peer reads it (after the first pass's row barrier).
__device__ Threshold select_threshold(OnePassSmem& s, const Candidates& c, uint32_t k2, int n_coop,
                                      int rank) {
  Threshold t{0u, 0u, {}, 0u};
  uint32_t krem = k2, prefix = 0;
  for (int pass = 0; pass < 3; ++pass) {
    uint32_t* hist = s.hist[(pass + 1) & 1];
    if (pass > 0) {
      for (int i = threadIdx.x; i < kBins; i += kThreads) hist[i] = 0;
      __syncthreads();
    }
    const int dshift = pass == 0 ? 21 : pass == 1 ? 10 : 0, bits = pass == 2 ? 10 : 11;
    candidate_histogram(c, hist, dshift, (1u << bits) - 1u, pass == 0 ? 32 : dshift + bits, prefix);
    row_sync(n_coop);
    // The last pass has 1024 bins; the other 1024 words are clear, so a 2048-bin search fits.
    find_bin<kBins>(hist, s.scan64, s.choice, krem, n_coop, rank);
    t.last = s.choice;
    krem -= t.last.above_tot;
    t.above_low += t.last.above_low;
    prefix = (prefix << bits) | t.last.bin;
  }
  t.key = prefix;        // 11 + 11 + 10 bits
  t.ties_needed = krem;  // >= 1
  return t;
}

// Writes candidate `chunk_index` (key `key`) if selected: class A (> T) takes slot
// base + ra + min(rb, ties), a tie takes base + ra + rb while rb < ties; ra / rb count the
// selected-class elements before it in position order.
template <TopkVariant V>
__device__ __forceinline__ void place(const RowJob& job, const Span& sp, uint32_t key,
                                      uint32_t threshold, uint32_t chunk_index, uint32_t base,
                                      uint32_t ties, uint32_t ra, uint32_t rb) {
  uint32_t slot = UINT32_MAX;
  if (key > threshold) slot = base + ra + min(rb, ties);
  if (key == threshold && rb < ties) slot = base + ra + rb;
  if (slot < job.k) __stcg(job.out + slot, job.image.map<V>(sp.pos(chunk_index)));
}

// Direct ranks over the row's n <= kRankSelectMax candidates (keys, in position order): candidate
// j's rank is the number of candidates above it in the §3e order (greater key, or an equal key at
// a lower position); the k2 of rank < k2 take slots base + rank. This CTA writes its own
// [first, first + n_own).
template <TopkVariant V>
__device__ void rank_select(const uint32_t* keys, uint32_t n, uint32_t first, uint32_t n_own,
                            uint32_t k2, uint32_t base, const uint32_t* cand_idx, const RowJob& job,
                            const Span& sp) {
  const uint32_t j = first + threadIdx.x;
  if (threadIdx.x >= n_own) return;
  const uint32_t key = keys[j];
  uint32_t rank = 0;
#pragma unroll 4                         // loads ahead of the compares: the loop is latency-bound
  for (uint32_t q = 0; q < n; q += 4) {  // keys is padded to a multiple of 4 (n <= 128 < cap)
    const uint4 w = *reinterpret_cast<const uint4*>(keys + q);
    const uint32_t v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t p = q + e;
      rank += (p < n && (v[e] > key || (v[e] == key && p < j))) ? 1u : 0u;
    }
  }
  if (rank < k2 && base + rank < job.k) {
    __stcg(job.out + base + rank, job.image.map<V>(sp.pos(cand_idx[threadIdx.x])));
  }
}

// Selects the K best positions of a row of len > K, this CTA being rank `rank` of n_coop.
template <TopkVariant V>
__device__ void onepass_select_row(OnePassSmem& s, float* chunk, const RowJob& job, int n_coop,
                                   int rank) {
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

  // Pass 1, piece by piece as the copies complete. The 16-bit keys of piece p overwrite floats of
  // piece p / 2, all read before the barrier (piece 0's own floats are in registers by then).
  uint16_t* keys16 = reinterpret_cast<uint16_t*>(chunk);
  for (uint32_t p = 0; p < pieces; ++p) {
    hopper::mbar_wait(&s.bar[p], 0);
    const uint32_t end = min(sp.n4, (p + 1) * kPieceFloats);
    constexpr int kPer = kPieceFloats / (4 * kThreads);  // float4s of a piece per thread
    uint32_t k[kPer][4];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const uint32_t i = p * kPieceFloats + 4 * (tid + u * kThreads);
      const float4 x =
          i < end ? *reinterpret_cast<const float4*>(chunk + i) : make_float4(0.f, 0.f, 0.f, 0.f);
      const float v[4] = {x.x, x.y, x.z, x.w};
      const uint32_t valid = i < end ? sp.valid4(i) : 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        k[u][e] = key16(v[e]);
        if ((valid >> e) & 1u) atomicAdd(&s.hist[0][k[u][e] >> 5], 1u);
      }
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const uint32_t i = p * kPieceFloats + 4 * (tid + u * kThreads);
      if (i < end) {
        *reinterpret_cast<uint2*>(keys16 + i) =
            make_uint2(k[u][0] | (k[u][1] << 16), k[u][2] | (k[u][3] << 16));
      }
    }
  }
  prof(3);
  row_sync(n_coop);  // also orders the last piece's keys before the classification reads them
  prof(4);
  find_bin<kBins>(s.hist[0], s.scan64, s.choice, job.k, n_coop, rank);
  prof(5);
  const BinChoice c1 = s.choice;
  const uint32_t b1 = c1.bin;
  const uint32_t n_cand = s.hist[0][b1];  // this CTA's candidates
  const bool buffered = n_cand <= uint32_t(kOnePassCandCap);
  if (tid == 0) s.n_cand = n_cand;

  classify_chunk<V>(s, keys16, sp, b1, c1.above_low, buffered, job);
  if (buffered) {  // the candidates' fp32 keys, every load in flight at once (L2 hits)
    for (uint32_t j = tid; j < n_cand; j += kThreads) s.cand_key[j] = sp.full_key(s.cand_idx[j]);
    // Zero padding up to a multiple of 4 for the vector reads of rank_select.
    if (tid < 4 && n_cand + tid < uint32_t(kOnePassCandCap)) s.cand_key[n_cand + tid] = 0;
  }
  __syncthreads();
  prof(6);

  // Every candidate of the row in one CTA's shared memory: each CTA selects over all of them,
  // with no cluster barrier until the end. Otherwise the cluster selects together.
  const uint32_t n_row = c1.bin_tot;  // the row's candidates
  const bool local = n_coop == 1 ? buffered : n_row <= uint32_t(kGatherCap);
  Candidates c{buffered ? s.cand_key : nullptr, n_cand, keys16, sp, b1};
  uint32_t my_first = 0;  // local: this CTA's first candidate among c.keys
  if (local && n_coop > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every peer's buffer and count are complete
    uint32_t off = 0;
    for (int r = 0; r < n_coop; ++r) {
      const uint32_t cnt = *cluster.map_shared_rank(&s.n_cand, r);
      const uint32_t* peer = cluster.map_shared_rank(s.cand_key, r);
      for (uint32_t j = tid; j < cnt; j += kThreads) s.all_key[off + j] = peer[j];
      off += cnt;
    }
    if (tid < 4 && off + tid < uint32_t(kGatherCap)) s.all_key[off + tid] = 0;
    __syncthreads();
    c.keys = s.all_key;
    c.n = off;  // == n_row
    my_first = c1.bin_low;
  }
  const uint32_t k2 = job.k - c1.above_tot;
  const uint32_t cand_base = c1.above_tot;  // the candidates' slots follow the sure winners'
  if (local && n_row <= uint32_t(kRankSelectMax)) {
    rank_select<V>(c.keys, c.n, my_first, n_cand, k2, cand_base, s.cand_idx, job, sp);
    prof(7);
  } else {
    const Threshold t = select_threshold(s, c, k2, local ? 1 : n_coop, rank);
    prof(7);
    // Locally every rank is counted in the sweep; in the cluster the lower ranks' share comes
    // from the histograms, and their ties go first.
    uint32_t base = cand_base, ties = t.ties_needed;
    if (!local) {
      base += t.above_low + min(t.ties_needed, t.last.bin_low);
      ties = t.ties_needed > t.last.bin_low ? t.ties_needed - t.last.bin_low : 0u;
    }
    auto classes = [&](uint32_t key) {
      return (key > t.key ? 1u : 0u) | (key == t.key ? 0x10u : 0u);
    };
    if (c.keys != nullptr) {
      ordered_sweep(
          s, my_first + n_cand, [&](uint32_t j) { return classes(c.keys[j]); },
          [&](uint32_t j, uint32_t ra, uint32_t rb) {
            if (j >= my_first) {
              place<V>(job, sp, c.keys[j], t.key, s.cand_idx[j - my_first], base, ties, ra, rb);
            }
          });
    } else {  // in chunk order, one element per lane
      ordered_sweep(
          s, sp.n4,
          [&](uint32_t i) {
            return sp.in(i) && (uint32_t{keys16[i]} >> 5) == b1 ? classes(sp.full_key(i)) : 0u;
          },
          [&](uint32_t i, uint32_t ra, uint32_t rb) {
            place<V>(job, sp, sp.full_key(i), t.key, i, base, ties, ra, rb);
          });
    }
  }
  prof(8);
  // No CTA may leave while a peer can still read its shared memory.
  if (n_coop > 1) cg::this_cluster().sync();
}

// One instantiation per variant, so the plain and ragged images are arithmetic the stores can be
// predicated on.
template <TopkVariant V>
__global__ void __launch_bounds__(kThreads, 1)
    topk_onepass_kernel(const __grid_constant__ KernelArgs a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
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
  onepass_select_row<V>(s, chunk, job, n_coop, rank);
}

}  // namespace dsa::kernels::topk_detail
