// MoE routing (noaux_tc, SPEC.md §8.6) on the GPU.
//
// Every number is computed exactly as moe_routing_ref computes it, so the expert ids are
// bit-identical given identical logits and the weights are too: sigmoid in fp64 rounded to fp32
// (1 / (1 + exp(-l)), device exp vs host exp can differ by one fp64 ulp, which changes the fp32
// result with probability ~2^-29), s' and the group sums as single fp32 adds, weights in fp64
// rounded once. Every selection is an arg-max under one strict total order (higher key, then lower
// index; NaN keys ranked as -inf), so the reduction order cannot change the winner.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/moe_routing/moe_routing.h"

namespace dsa::kernels {

namespace {

constexpr int kMaxSmemBytes = 48 * 1024;  // the default dynamic shared-memory limit

// Per-warp scratch: s[E], key[E] (fp32), group_score[G] (fp32), selected[k] (int32),
// taken[E], kept[G] (bytes).
struct Scratch {
  float* s;
  float* key;
  float* group_score;
  int32_t* selected;
  uint8_t* taken;
  uint8_t* kept;
};

__host__ __device__ int64_t scratch_bytes(int32_t e, int32_t g, int32_t k) {
  const int64_t bytes = 4 * (2 * int64_t{e} + g + k) + e + g;
  return (bytes + 15) / 16 * 16;
}

__device__ Scratch carve(unsigned char* base, int32_t e, int32_t g, int32_t k) {
  Scratch s;
  s.s = reinterpret_cast<float*>(base);
  s.key = s.s + e;
  s.group_score = s.key + e;
  s.selected = reinterpret_cast<int32_t*>(s.group_score + g);
  s.taken = reinterpret_cast<uint8_t*>(s.selected + k);
  s.kept = s.taken + e;
  return s;
}

__device__ float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

__device__ bool outranks(float key_a, int32_t a, float key_b, int32_t b) {
  return key_a > key_b || (key_a == key_b && a < b);
}

// The best (key, index) over the warp; index -1 = no candidate. Same answer in every lane.
__device__ int32_t warp_argmax(float key, int32_t idx) {
  for (int o = 16; o > 0; o >>= 1) {
    const float k2 = __shfl_xor_sync(0xFFFFFFFFu, key, o);
    const int32_t i2 = __shfl_xor_sync(0xFFFFFFFFu, idx, o);
    if (i2 >= 0 && (idx < 0 || outranks(k2, i2, key, idx))) key = k2, idx = i2;
  }
  return idx;
}

// One warp routes one row t: logits[t, 0:E] -> expert_ids[t, 0:k], weights[t, 0:k] (and the
// shared expert at slot k when routing_slots says so).
// Checked mode (err != null): a negative row_len or a non-finite logit or bias reports OutOfRange
// (row t; value = row_len, or the expert index of the bad logit / bias); the outputs are then
// unspecified but every access stays in bounds.
__global__ void moe_routing_kernel(MoeRoutingParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t{blockIdx.x} * (blockDim.x / 32) + warp;
  if (t >= p.num_tokens) return;  // warp-uniform; the kernel has no block-wide barrier
  const int32_t E = p.num_experts, G = p.num_groups, K = p.top_k, group_size = E / G;
  Scratch sc = carve(smem + warp * scratch_bytes(E, G, K), E, G, K);
  const int32_t slots = routing_slots(p);
  int32_t* ids = p.expert_ids + t * slots;
  float* w = p.weights + t * slots;

  const int32_t len = p.row_len != nullptr ? p.row_len[t] : 1;
  if (len < 0 && lane == 0)
    cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                              static_cast<int32_t>(t), len);
  if (len <= 0) {  // padded row: no dispatch
    for (int32_t j = lane; j < slots; j += 32) ids[j] = -1, w[j] = 0.f;
    return;
  }
  if (slots > K && lane == 0) ids[K] = p.shared_expert_id, w[K] = 1.f;

  // ---- scores: s = sigmoid(l) (fp64, rounded to fp32), key = s + bias (one fp32 add) ----
  for (int32_t e = lane; e < E; e += 32) {
    const float l = p.logits[t * E + e], b = p.bias[e];
    if (!isfinite(l) || !isfinite(b))
      cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                                static_cast<int32_t>(t), e);
    const float s = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(l))));
    sc.s[e] = s;
    sc.key[e] = rank_key(__fadd_rn(s, b));
    sc.taken[e] = 0;
  }
  __syncwarp();

  // ---- group scores: the two best keys of each group, added in fp32 ----
  for (int32_t g = lane; g < G; g += 32) {
    const int32_t lo = g * group_size, hi = lo + group_size;
    int32_t first = lo, second = -1;
    for (int32_t e = lo + 1; e < hi; ++e)
      if (outranks(sc.key[e], e, sc.key[first], first)) first = e;
    for (int32_t e = lo; e < hi; ++e)
      if (e != first && (second < 0 || outranks(sc.key[e], e, sc.key[second], second))) second = e;
    sc.group_score[g] = rank_key(__fadd_rn(sc.key[first], sc.key[second]));
    sc.kept[g] = 0;
  }
  __syncwarp();

  // ---- keep the topk_group best groups ----
  for (int32_t r = 0; r < p.topk_group; ++r) {
    float best_key = 0.f;
    int32_t best = -1;
    for (int32_t g = lane; g < G; g += 32)
      if (!sc.kept[g] && (best < 0 || outranks(sc.group_score[g], g, best_key, best)))
        best = g, best_key = sc.group_score[g];
    best = warp_argmax(best_key, best);
    __syncwarp();
    if (lane == 0) sc.kept[best] = 1;
    __syncwarp();
  }

  // ---- the top_k experts of the kept groups, by key ----
  double sum = 0.0;  // sum of the selected s in selection order (the reference's order)
  for (int32_t j = 0; j < K; ++j) {
    float best_key = 0.f;
    int32_t best = -1;
    for (int32_t e = lane; e < E; e += 32)
      if (sc.kept[e / group_size] && !sc.taken[e] &&
          (best < 0 || outranks(sc.key[e], e, best_key, best)))
        best = e, best_key = sc.key[e];
    best = warp_argmax(best_key, best);
    __syncwarp();
    if (lane == 0) sc.taken[best] = 1, sc.selected[j] = best;
    sum += static_cast<double>(sc.s[best]);
    __syncwarp();
  }

  // ---- weights: s * factor (/ sum when norm_topk_prob), fp64 rounded once ----
  for (int32_t j = lane; j < K; j += 32) {
    const int32_t e = sc.selected[j];
    double g = static_cast<double>(sc.s[e]) * static_cast<double>(p.routed_scaling_factor);
    if (p.norm_topk_prob) g = sum > 0.0 ? g / sum : 0.0;
    ids[j] = e;
    w[j] = static_cast<float>(g);
  }
}

}  // namespace

Status moe_routing_cuda(const MoeRoutingParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t per_warp = scratch_bytes(p.num_experts, p.num_groups, p.top_k);
  if (per_warp > kMaxSmemBytes) {
    return unimplemented("moe_routing_cuda: num_experts = " + std::to_string(p.num_experts) +
                         ": the per-row scratch exceeds 48 KiB of shared memory");
  }
  const int warps = per_warp * 4 <= kMaxSmemBytes ? 4 : 1;
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const int64_t blocks = (int64_t{p.num_tokens} + warps - 1) / warps;
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(warps * 32),
                        size_t(static_cast<size_t>(per_warp * warps)), cuda::current_stream()},
      moe_routing_kernel, p, err));
  return cuda::end_launch(
      "moe_routing", checked,
      "moe_routing: row_len[row] < 0, or a non-finite logit / bias at expert (value)");
}

}  // namespace dsa::kernels
