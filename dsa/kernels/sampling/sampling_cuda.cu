// Token sampling (SPEC.md §6.2, §6.3) on the GPU: one CTA per row, the same rules as
// dsa/kernels/sampling/sampler.cc (the reference), computed with the same DSA_HD Philox / Gumbel
// helpers.
//
// Per row, by the row's own params (read on the device):
//  - temperature 0: argmax of the fp32 logits, ties to the lowest id, NaN / -inf never chosen.
//  - temperature > 0, no filter: two passes. Pass 1: max scaled logit m (scaled = logit / T in
//    fp64; if some logit is +inf, the +inf tokens scale to 0 and every other token is ineligible).
//    Pass 2: argmax of scaled + gamma_p(v), ties to the lowest id; a group of four tokens draws its
//    Philox block only when one of them can still win (s + kGumbelHi >= m + kGumbelLo), which
//    skips exactly the tokens the reference skips or fewer, so the argmax is unchanged.
//  - temperature > 0 with top-k / top-p (V <= kSamplingMaxFilteredVocab): the row's eligible tokens
//    are sorted in shared memory by a bitonic sort of 64-bit keys (order key of the logit, then
//    ~id): scaled logit descending, ties to the lower id — the reference's strict total order
//    (logit / T is strictly monotone in the logit; -0 is folded onto +0 first). top-k keeps the
//    first k; top-p keeps the shortest prefix whose mass reaches top_p, with w = exp(s - m) in
//    fp64, the normaliser z summed by a fixed-order block tree (the reference sums in id order, so
//    z may differ in its last bits: a different cut-off needs the prefix mass within ~1e-15 of
//    top_p) and the mass accumulated serially in sorted order exactly as the reference does. Then
//    the Gumbel argmax over the kept prefix.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/sampling/philox.h"
#include "dsa/kernels/sampling/sampling.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
// Bounds of gamma = -ln(-ln U) over U in [2^-24, 1 - 2^-24]: [-2.8115, 16.6355], widened so that
// device rounding of the logs cannot leave them.
constexpr double kGumbelLo = -2.82;
constexpr double kGumbelHi = 16.64;

// A candidate token and its score; id < 0 = none. Strict total order: higher score, then lower id.
struct Cand {
  double s;
  int32_t id;
};

__device__ __forceinline__ bool better(const Cand& a, const Cand& b) {
  return a.id >= 0 && (b.id < 0 || a.s > b.s || (a.s == b.s && a.id < b.id));
}

// The best candidate of the block, in every thread. `red_*` are [kWarps] shared scratch.
__device__ Cand block_argmax(Cand c, double* red_s, int32_t* red_id) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    Cand other{__shfl_xor_sync(0xFFFFFFFFu, c.s, o), __shfl_xor_sync(0xFFFFFFFFu, c.id, o)};
    if (better(other, c)) c = other;
  }
  __syncthreads();  // red_* may still be read by a previous reduction
  if (lane == 0) red_s[warp] = c.s, red_id[warp] = c.id;
  __syncthreads();
  c = Cand{red_s[0], red_id[0]};
  for (int w = 1; w < kWarps; ++w) {
    const Cand other{red_s[w], red_id[w]};
    if (better(other, c)) c = other;
  }
  return c;
}

// Block max / sum in a fixed order (deterministic), in every thread.
template <bool kSum>
__device__ double block_reduce(double v, double* red_s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    const double other = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = kSum ? v + other : fmax(v, other);
  }
  __syncthreads();
  if (lane == 0) red_s[warp] = v;
  __syncthreads();
  v = red_s[0];
  for (int w = 1; w < kWarps; ++w) v = kSum ? v + red_s[w] : fmax(v, red_s[w]);
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

// gamma_p(v) of §6.3 for one token.
__device__ __forceinline__ float gumbel_at(PhiloxKey key, uint32_t pos, int32_t v) {
  const PhiloxCounter c = philox4x32_10(sampling_counter(static_cast<uint32_t>(v) >> 2, pos), key);
  return gumbel_from_uniform(uniform_from_word(pick(c, v & 3)));
}

// Monotone map of a non-NaN float to uint32 (larger float -> larger key); the inverse below.
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

__host__ __device__ int32_t pow2_at_least(int32_t n) {
  int32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// One CTA samples one row r: logits[r, 0:V] and the row's params -> out[r].
// Dynamic shared memory (filtered rows only, sort_cap = pow2 >= V, or 0 when V is over the limit):
// keys [sort_cap] uint64, then ids [sort_cap] int32.
__global__ void __launch_bounds__(kThreads)
    sampling_kernel(SamplingOpParams p, int32_t sort_cap, cuda::DeviceErrorWord* err) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ double red_s[kWarps];
  __shared__ int32_t red_id[kWarps];
  __shared__ int32_t shared_count;
  __shared__ int32_t shared_cut;

  const int32_t r = static_cast<int32_t>(blockIdx.x);
  const int32_t V = p.vocab;
  const int tid = static_cast<int>(threadIdx.x);
  const float* x = p.logits + int64_t{r} * V;
  const float temperature = p.temperature[r], top_p = p.top_p[r];
  const int32_t top_k = p.top_k[r], position = p.position[r];

  int32_t bad = 0;
  if (!isfinite(temperature) || temperature < 0.f) {
    bad = 1;
  } else if (!(top_p > 0.f && top_p <= 1.f)) {
    bad = 2;
  } else if (top_k < 0) {
    bad = 3;
  } else if (position < 0) {
    bad = 4;
  }
  const bool filtered = temperature > 0.f && ((top_k > 0 && top_k < V) || top_p < 1.f);
  if (bad == 0 && filtered && sort_cap == 0) bad = 5;
  if (bad != 0) {  // block-uniform
    if (tid == 0) {
      cuda::report_device_error(err, StatusCode::kInvalidArgument, cuda::OpId::kModelOp, r, bad);
      p.out[r] = -1;
    }
    return;
  }

  // ---- greedy ----
  if (temperature == 0.f) {
    Cand best{-INFINITY, -1};
    for (int32_t v = tid; v < V; v += kThreads) {
      const float l = x[v];
      const Cand c{static_cast<double>(l), v};
      if (l > -INFINITY && better(c, best)) best = c;  // NaN and -inf are never eligible
    }
    best = block_argmax(best, red_s, red_id);
    if (tid == 0) p.out[r] = best.id;
    return;
  }

  const double t = static_cast<double>(temperature);
  bool any_inf = false;
  for (int32_t v = tid; v < V; v += kThreads) any_inf |= x[v] == INFINITY;
  const bool pos_inf = __syncthreads_or(any_inf) != 0;
  const PhiloxKey key = philox_key(p.seed[r]);
  const uint32_t pos = static_cast<uint32_t>(position);

  // ---- unfiltered: Gumbel argmax over every eligible token ----
  if (!filtered) {
    double m = -INFINITY;
    for (int32_t v = tid; v < V; v += kThreads) m = fmax(m, scaled_logit(x[v], t, pos_inf));
    m = block_reduce<false>(m, red_s);
    const double floor_score = m + kGumbelLo;  // the max token scores at least this
    Cand best{-INFINITY, -1};
    const int32_t groups = (V + 3) / 4;
    for (int32_t g = tid; g < groups; g += kThreads) {
      double s[4];
      bool any = false;
      for (int j = 0; j < 4; ++j) {
        const int32_t v = 4 * g + j;
        s[j] = v < V ? scaled_logit(x[v], t, pos_inf) : -INFINITY;
        if (s[j] > -INFINITY && s[j] + kGumbelHi >= floor_score)
          any = true;
        else
          s[j] = -INFINITY;
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
    best = block_argmax(best, red_s, red_id);
    if (tid == 0) p.out[r] = best.id;
    return;
  }

  // ---- filtered: sort, top-k, top-p, Gumbel argmax over the kept prefix ----
  uint64_t* keys = reinterpret_cast<uint64_t*>(smem);
  int32_t* ids = reinterpret_cast<int32_t*>(keys + sort_cap);
  if (tid == 0) shared_count = 0;
  __syncthreads();
  int32_t eligible = 0;
  for (int32_t i = tid; i < sort_cap; i += kThreads) {
    uint64_t k = 0;  // below every eligible key
    if (i < V) {
      float l = x[i];
      if (scaled_logit(l, t, pos_inf) > -INFINITY) {
        if (l == 0.f) l = 0.f;  // -0 and +0 scale to equal values: tie, lower id first
        k = (uint64_t{order_key(l)} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
        ++eligible;
      }
    }
    keys[i] = k;
  }
  if (eligible) atomicAdd(&shared_count, eligible);
  __syncthreads();
  const int32_t n = shared_count;
  if (n == 0) {
    if (tid == 0) p.out[r] = -1;
    return;
  }
  // Bitonic sort, descending.
  for (int32_t size = 2; size <= sort_cap; size <<= 1) {
    for (int32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int32_t i = tid; i < sort_cap; i += kThreads) {
        const int32_t j = i ^ stride;
        if (j > i) {
          const uint64_t a = keys[i], b = keys[j];
          const bool descending = (i & size) == 0;
          if (descending ? a < b : a > b) keys[i] = b, keys[j] = a;
        }
      }
      __syncthreads();
    }
  }
  const int32_t kept_k = (top_k > 0 && top_k < n) ? top_k : n;
  const auto key_id = [](uint64_t k) {
    return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(k));
  };
  const auto key_scaled = [&](uint64_t k) {
    return pos_inf ? 0.0 : static_cast<double>(key_float(static_cast<uint32_t>(k >> 32))) / t;
  };
  const double m = key_scaled(keys[0]);
  __syncthreads();  // every thread has read keys[0] before top-p rewrites it
  int32_t cut = kept_k;
  if (top_p < 1.f) {
    // Thread i reads and rewrites only keys[i]: w_i as fp64 bits, the id moves to ids[i].
    double partial = 0;
    for (int32_t i = tid; i < kept_k; i += kThreads) {
      const uint64_t k = keys[i];
      const double w = exp(key_scaled(k) - m);
      ids[i] = key_id(k);
      keys[i] = static_cast<uint64_t>(__double_as_longlong(w));
      partial += w;
    }
    const double z = block_reduce<true>(partial, red_s);  // ends with a barrier-covered read
    if (tid == 0) {
      double mass = 0;
      int32_t c = kept_k;
      for (int32_t i = 0; i < kept_k; ++i) {
        mass += __longlong_as_double(static_cast<long long>(keys[i])) / z;
        if (mass >= static_cast<double>(top_p)) {
          c = i + 1;
          break;
        }
      }
      shared_cut = c;
    }
    __syncthreads();
    cut = shared_cut;
  } else {
    for (int32_t i = tid; i < kept_k; i += kThreads) ids[i] = key_id(keys[i]);
    __syncthreads();
  }
  const double floor_score = m + kGumbelLo;
  Cand best{-INFINITY, -1};
  for (int32_t i = tid; i < cut; i += kThreads) {
    const int32_t v = ids[i];
    const double s = scaled_logit(x[v], t, pos_inf);
    if (s + kGumbelHi < floor_score) continue;
    const Cand cand{s + static_cast<double>(gumbel_at(key, pos, v)), v};
    if (better(cand, best)) best = cand;
  }
  best = block_argmax(best, red_s, red_id);
  if (tid == 0) p.out[r] = best.id;
}

}  // namespace

Status sample_rows_cuda(const SamplingOpParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.rows == 0) return ok_status();
  const int32_t sort_cap = p.vocab <= kSamplingMaxFilteredVocab ? pow2_at_least(p.vocab) : 0;
  const size_t smem = size_t(sort_cap) * (sizeof(uint64_t) + sizeof(int32_t));
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem(sampling_kernel, smem));  // smem varies per call
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  sampling_kernel<<<static_cast<unsigned>(p.rows), kThreads, smem, cuda::current_stream()>>>(
      p, sort_cap, err);
  return cuda::end_launch("sampling_kernel", checked, "sample_rows_cuda");
}

}  // namespace dsa::kernels
