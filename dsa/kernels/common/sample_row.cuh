// One CTA samples one row of logits (SPEC.md §6.2, §6.3) with the rules of
// dsa/kernels/sampling/sampler.cc (the reference), computed with the same DSA_HD Philox / Gumbel
// helpers. Shared by the sampling op (one row per CTA) and the acceptance op (one verify row per
// CTA), so both draw the same token from the same row; it sits in common/ because an op folder
// may include another op's public header only.
//
// Per row, by the row's own params:
//  - temperature 0: argmax of the fp32 logits, ties to the lowest id, NaN / -inf never chosen.
//  - temperature > 0: every eligible token gets a 64-bit key, (order key of the logit, -0 folded
//    onto +0) above (the id's complement), so that key order is the reference's strict total order
//    (scaled logit descending, ties to the lower id; logit / T is strictly monotone in the logit).
//    Keys are unique, so "the k largest keys" is a threshold: the filters reduce to a cut key and
//    the kept set is {v : key(v) >= cut}, for any V.
//      top-k: cut = the k-th largest key, by a radix select over the row in global memory (8-bit
//      digits from the top, warp-aggregated shared histograms; ceil((32 + id bits) / 8) passes).
//      top-p: the kept set's descending order is produced in chunks of kSortChunk keys (each chunk
//      the next kSortChunk largest keys, found by the same select and sorted in shared memory) and
//      the mass is accumulated serially in that order exactly as the reference does, w = exp(s -
//      m) in fp64, until it reaches top_p. The normaliser z is summed by a fixed-order block tree
//      (the reference sums in id order, so z may differ in its last bits: a different cut-off
//      needs the prefix mass within ~1e-15 of top_p).
//    Then the Gumbel argmax over the kept tokens, in id order; a group of four tokens draws its
//    Philox block only when one of them can still win (s + kGumbelHi >= m + kGumbelLo), which
//    skips exactly the tokens the reference skips or fewer, so the argmax is unchanged.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/kernels/common/philox.h"

namespace dsa::kernels::sampling_device {

inline constexpr int kThreads = 512;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kRadixBins = 256;
// Keys sorted at once by top-p: 2048 x (8 B key + 8 B mass) = 32 KB of static shared memory, so
// the kernels need no dynamic-smem opt-in; a long top-p prefix takes several chunks.
inline constexpr int32_t kSortChunk = 2048;
// Bounds of gamma = -ln(-ln U) over U in [2^-24, 1 - 2^-24]: [-2.8115, 16.6355], widened so that
// device rounding of the logs cannot leave them.
inline constexpr double kGumbelLo = -2.82;
inline constexpr double kGumbelHi = 16.64;

// One row's sampling params (SamplingParams' fields and the absolute position).
struct RowParams {
  float temperature;
  float top_p;
  int32_t top_k;
  uint64_t seed;
  int32_t position;
};

// The block's scratch; the caller declares it __shared__ and passes it to every CTA thread.
struct Smem {
  double red_s[kWarps];
  int32_t red_id[kWarps];
  uint32_t hist[kRadixBins];
  uint64_t keys[kSortChunk];
  double mass[kSortChunk];
  int32_t count;
  int32_t bin, above;
  uint64_t found;  // 0 = not found
};

// The row-param check of the reference (sampler.h validate() and position >= 0): 0 = fine, else
// the error word's value (1 temperature, 2 top_p, 3 top_k, 4 position).
__device__ __forceinline__ int32_t row_param_error(const RowParams& rp) {
  if (!isfinite(rp.temperature) || rp.temperature < 0.f) return 1;
  if (!(rp.top_p > 0.f && rp.top_p <= 1.f)) return 2;
  if (rp.top_k < 0) return 3;
  if (rp.position < 0) return 4;
  return 0;
}

// A candidate token and its score; id < 0 = none. Strict total order: higher score, then lower id.
struct Cand {
  double s;
  int32_t id;
};

__device__ __forceinline__ bool better(const Cand& a, const Cand& b) {
  return a.id >= 0 && (b.id < 0 || a.s > b.s || (a.s == b.s && a.id < b.id));
}

// What block_argmax needs of the block's scratch: Smem, or a kernel's own small scratch where
// only the greedy scan runs (greedy_row), which then needs no 34 KB of shared memory.
struct ArgmaxSmem {
  double red_s[kWarps];
  int32_t red_id[kWarps];
};

// The best candidate of the block, in every thread. S: Smem or ArgmaxSmem.
template <typename S>
__device__ inline Cand block_argmax(Cand c, S& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    Cand other{__shfl_xor_sync(0xFFFFFFFFu, c.s, o), __shfl_xor_sync(0xFFFFFFFFu, c.id, o)};
    if (better(other, c)) c = other;
  }
  __syncthreads();  // red_* may still be read by a previous reduction
  if (lane == 0) sm.red_s[warp] = c.s, sm.red_id[warp] = c.id;
  __syncthreads();
  c = Cand{sm.red_s[0], sm.red_id[0]};
  for (int w = 1; w < kWarps; ++w) {
    const Cand other{sm.red_s[w], sm.red_id[w]};
    if (better(other, c)) c = other;
  }
  return c;
}

// Block max / sum in a fixed order (deterministic), in every thread.
template <bool kSum>
__device__ inline double block_reduce(double v, Smem& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    const double other = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = kSum ? v + other : fmax(v, other);
  }
  __syncthreads();
  if (lane == 0) sm.red_s[warp] = v;
  __syncthreads();
  v = sm.red_s[0];
  for (int w = 1; w < kWarps; ++w) v = kSum ? v + sm.red_s[w] : fmax(v, sm.red_s[w]);
  return v;
}

// The reference's Scaler: fp64 logit / T; with a +inf logit in the row, +inf -> 0, others -inf.
__device__ __forceinline__ double scaled_logit(float x, double t, bool pos_inf) {
  if (isnan(x) || x == -INFINITY || (pos_inf && x != INFINITY)) return -INFINITY;
  return pos_inf ? 0.0 : static_cast<double>(x) / t;
}

__device__ __forceinline__ uint32_t pick(const PhiloxCounter& c, int j) {
  return j == 0 ? c.w[0] : j == 1 ? c.w[1] : j == 2 ? c.w[2] : c.w[3];
}

// Monotone map of a non-NaN float to uint32 (larger float -> larger key); the inverse below.
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// The keys of one row at temperature > 0: 0 = ineligible; eligible keys are >= 1 (the smallest
// order key of an eligible logit is above order_key(-inf) > 0) and pairwise distinct.
struct RowKeys {
  const float* x;
  int32_t vocab;
  double t;
  bool pos_inf;
  int id_bits;      // bits of vocab - 1, at most 31
  uint64_t id_max;  // 2^id_bits - 1

  __device__ uint64_t key(int32_t v) const {
    float l = x[v];
    if (isnan(l) || l == -INFINITY || (pos_inf && l != INFINITY)) return 0;
    if (l == 0.f) l = 0.f;  // -0 and +0 scale to equal values: tie, lower id first
    return (uint64_t{order_key(l)} << id_bits) | (id_max - static_cast<uint64_t>(v));
  }
  __device__ int32_t id(uint64_t k) const { return static_cast<int32_t>(id_max - (k & id_max)); }
  __device__ double scaled(uint64_t k) const {
    return pos_inf ? 0.0 : static_cast<double>(key_float(static_cast<uint32_t>(k >> id_bits))) / t;
  }
};

// The want-th largest eligible key below hi (1 <= want <= their number): the keys are distinct,
// so exactly `want` of them lie in [result, hi). Same value in every thread.
__device__ inline uint64_t select_below(const RowKeys& rk, uint64_t hi, int32_t want, Smem& sm) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const int width = 32 + rk.id_bits;
  uint64_t prefix = 0, mask = 0;
  for (int shift = (width + 7) / 8 * 8 - 8; shift >= 0; shift -= 8) {
    for (int i = tid; i < kRadixBins; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    // Warp-uniform trip count, so every lane takes part in __match_any_sync.
    for (int32_t base = 0; base < rk.vocab; base += kThreads) {
      const int32_t v = base + tid;
      int bin = kRadixBins;  // no count
      if (v < rk.vocab) {
        const uint64_t k = rk.key(v);
        if (k != 0 && k < hi && (k & mask) == prefix) bin = static_cast<int>((k >> shift) & 255);
      }
      // Logits cluster in a few top digits: one atomic per distinct bin of the warp.
      const unsigned same = __match_any_sync(0xFFFFFFFFu, bin);
      if (bin < kRadixBins && lane == __ffs(same) - 1) atomicAdd(&sm.hist[bin], __popc(same));
    }
    __syncthreads();
    if (tid == 0) {
      int32_t above = 0;
      int b = kRadixBins - 1;
      for (; b > 0; --b) {
        if (above + static_cast<int32_t>(sm.hist[b]) >= want) break;
        above += static_cast<int32_t>(sm.hist[b]);
      }
      sm.bin = b;
      sm.above = above;
    }
    __syncthreads();
    want -= sm.above;
    prefix |= static_cast<uint64_t>(sm.bin) << shift;
    mask |= uint64_t{255} << shift;
    // The next pass's writes to sm.bin come after its two barriers: no third one needed here.
  }
  return prefix;
}

// top-p over the kept set {key >= cut} (kept_k keys, maximum scaled logit m): the smallest key of
// the shortest descending prefix whose mass reaches top_p, or cut if rounding leaves the total
// below. Same value in every thread.
__device__ inline uint64_t top_p_cut(const RowKeys& rk, uint64_t cut, int32_t kept_k, double m,
                                     float top_p, Smem& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  double partial = 0;
  for (int32_t v = tid; v < rk.vocab; v += kThreads) {
    const uint64_t k = rk.key(v);
    if (k != 0 && k >= cut) partial += exp(rk.scaled(k) - m);
  }
  const double z = block_reduce<true>(partial, sm);
  double mass = 0;  // thread 0's running sum, in the reference's order, across chunks
  uint64_t hi = ~uint64_t{0};
  for (int32_t done = 0; done < kept_k;) {
    const int32_t c = min(kSortChunk, kept_k - done);
    const uint64_t lo = c == kept_k - done ? cut : select_below(rk, hi, c, sm);
    if (tid == 0) sm.count = 0;
    __syncthreads();
    for (int32_t v = tid; v < rk.vocab; v += kThreads) {
      const uint64_t k = rk.key(v);
      if (k != 0 && k >= lo && k < hi) sm.keys[atomicAdd(&sm.count, 1)] = k;
    }
    int32_t cap = 1;
    while (cap < c) cap <<= 1;
    for (int32_t i = c + tid; i < cap; i += kThreads) sm.keys[i] = 0;  // below every key
    __syncthreads();
    // Bitonic sort of keys[0, cap), descending.
    for (int32_t size = 2; size <= cap; size <<= 1) {
      for (int32_t stride = size >> 1; stride > 0; stride >>= 1) {
        for (int32_t i = tid; i < cap; i += kThreads) {
          const int32_t j = i ^ stride;
          if (j > i) {
            const uint64_t a = sm.keys[i], b = sm.keys[j];
            if ((i & size) == 0 ? a < b : a > b) sm.keys[i] = b, sm.keys[j] = a;
          }
        }
        __syncthreads();
      }
    }
    for (int32_t i = tid; i < c; i += kThreads) sm.mass[i] = exp(rk.scaled(sm.keys[i]) - m) / z;
    __syncthreads();
    if (tid == 0) {
      sm.found = 0;
      for (int32_t i = 0; i < c; ++i) {
        mass += sm.mass[i];
        if (mass >= static_cast<double>(top_p)) {
          sm.found = sm.keys[i];
          break;
        }
      }
    }
    __syncthreads();
    const uint64_t found = sm.found;
    __syncthreads();  // every thread has read found before a next chunk rewrites it
    if (found != 0) return found;
    done += c;
    hi = lo;
  }
  return cut;
}

// Gumbel argmax over the eligible tokens with key >= cut (cut = 1: all of them), m the maximum
// scaled logit (that token is always kept).
__device__ inline int32_t gumbel_argmax(const RowKeys& rk, uint64_t cut, double m, PhiloxKey key,
                                        uint32_t pos, Smem& sm) {
  const double floor_score = m + kGumbelLo;  // the max token scores at least this
  Cand best{-INFINITY, -1};
  const int32_t groups = (rk.vocab + 3) / 4;
  for (int32_t g = static_cast<int32_t>(threadIdx.x); g < groups; g += kThreads) {
    double s[4];
    bool any = false;
    for (int j = 0; j < 4; ++j) {
      const int32_t v = 4 * g + j;
      s[j] = -INFINITY;
      if (v >= rk.vocab) continue;
      const uint64_t k = rk.key(v);
      if (k == 0 || k < cut) continue;
      const double sv = rk.scaled(k);
      if (sv + kGumbelHi >= floor_score) s[j] = sv, any = true;
    }
    if (!any) continue;
    const PhiloxCounter c = philox4x32_10(sampling_counter(static_cast<uint32_t>(g), pos), key);
    for (int j = 0; j < 4; ++j) {
      if (s[j] == -INFINITY) continue;
      const double gamma = gumbel_from_uniform(uniform_from_word(pick(c, j)));
      const Cand cand{s[j] + gamma, 4 * g + j};
      if (better(cand, best)) best = cand;
    }
  }
  return block_argmax(best, sm).id;
}

// The first 4 kThreads 16-byte words of a row (a vocabulary of up to 8192 whole), loaded by a
// kernel before its per-request params, so that at temperature 0 the two loads' latencies overlap
// (the greedy scan starts from it). Empty where the row is not 16-byte aligned.
struct RowHead {
  float4 q[4];
};

__device__ __forceinline__ int32_t aligned_quads(const float* x, int32_t V) {
  return (reinterpret_cast<uintptr_t>(x) & 15) == 0 ? V / 4 : 0;
}

__device__ __forceinline__ RowHead load_row_head(const float* x, int32_t V) {
  RowHead h;
  const int32_t nv = aligned_quads(x, V), tid = static_cast<int32_t>(threadIdx.x);
  const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if (tid + u * kThreads < nv) h.q[u] = __ldg(x4 + tid + u * kThreads);
  }
  return h;
}

// The argmax of row x[0, V) (temperature 0), -1 when no token is eligible; the same value in every
// thread. `head`, where given, is load_row_head(x, V). S: Smem or ArgmaxSmem.
template <typename S>
__device__ inline int32_t greedy_row(const float* x, int32_t V, S& sm,
                                     const RowHead* head = nullptr) {
  const int tid = static_cast<int>(threadIdx.x);
  Cand best{-INFINITY, -1};
  const auto consider = [&best](float l, int32_t v) {
    const Cand c{static_cast<double>(l), v};
    if (l > -INFINITY && better(c, best)) best = c;  // NaN and -inf are never eligible
  };
  // better() is a strict total order, so any split of the scan picks the same token: 16-byte
  // loads, four in flight per thread (one scalar load at a time left a 517 KB row of V3.2's
  // vocabulary at ~5 GB/s, 115 us per row), then the unaligned tail one by one.
  const int32_t nv = aligned_quads(x, V);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  for (int32_t i = tid; i < nv; i += 4 * kThreads) {
    float4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (head != nullptr && i == tid) {
        q[u] = head->q[u];
      } else if (i + u * kThreads < nv) {
        q[u] = __ldg(x4 + i + u * kThreads);
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int32_t k = i + u * kThreads;
      if (k >= nv) break;
      consider(q[u].x, 4 * k);
      consider(q[u].y, 4 * k + 1);
      consider(q[u].z, 4 * k + 2);
      consider(q[u].w, 4 * k + 3);
    }
  }
  for (int32_t v = 4 * nv + tid; v < V; v += kThreads) consider(x[v], v);
  return block_argmax(best, sm).id;
}

// The token of row x[0, V) under rp (which passed row_param_error), -1 when no token is eligible;
// the same value in every thread. Every branch is block-uniform. `head`, where given, is
// load_row_head(x, V).
__device__ inline int32_t sample_row(const float* x, int32_t V, const RowParams& rp, Smem& sm,
                                     const RowHead* head = nullptr) {
  if (rp.temperature == 0.f) return greedy_row(x, V, sm, head);
  const int tid = static_cast<int>(threadIdx.x);
  bool any_inf = false;
  for (int32_t v = tid; v < V; v += kThreads) any_inf |= x[v] == INFINITY;
  RowKeys rk{x, V, static_cast<double>(rp.temperature), __syncthreads_or(any_inf) != 0, 0, 0};
  while (rk.id_bits < 31 && (int64_t{1} << rk.id_bits) < V) ++rk.id_bits;
  rk.id_max = (uint64_t{1} << rk.id_bits) - 1;

  // m = the maximum scaled logit; n = the number of eligible tokens.
  if (tid == 0) sm.count = 0;
  __syncthreads();
  double m = -INFINITY;
  int32_t eligible = 0;
  for (int32_t v = tid; v < V; v += kThreads) {
    const double s = scaled_logit(x[v], rk.t, rk.pos_inf);
    if (s > -INFINITY) m = fmax(m, s), ++eligible;
  }
  if (eligible) atomicAdd(&sm.count, eligible);
  m = block_reduce<false>(m, sm);  // its barriers also publish sm.count
  const int32_t n = sm.count;
  if (n == 0) return -1;

  const int32_t kept_k = (rp.top_k > 0 && rp.top_k < n) ? rp.top_k : n;
  uint64_t cut = kept_k < n ? select_below(rk, ~uint64_t{0}, kept_k, sm) : 1;
  if (rp.top_p < 1.f) cut = top_p_cut(rk, cut, kept_k, m, rp.top_p, sm);
  const int32_t y =
      gumbel_argmax(rk, cut, m, philox_key(rp.seed), static_cast<uint32_t>(rp.position), sm);
  __syncthreads();  // sm.count is rewritten by the next row of a caller's loop
  return y;
}

}  // namespace dsa::kernels::sampling_device
