// Benchmark of attention_prologue_cuda against the six launches it replaces (rmsnorm_cuda of qa,
// rmsnorm_cuda + rope_cuda of the latent rows, layernorm_cuda + rope_cuda + hadamard_cuda of the
// indexer's key) at V3.2 widths: q_lora 1536, the inputs as the fused q_a + wk + kv_a linear
// writes them (rows of 1536 + 128 + 576 bf16), T in {1, 4, 32, 512}. Memory-bound: bytes = T (2
// q_lora + 2 * 576 + 2 * 128) bf16 (each row read once and written once). Unchecked mode (no
// sync). The latent rows are normalised and roped in place again on every launch; their values do
// not change the work.
#include <cuda_runtime.h>

#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

constexpr int32_t kQLora = 1536;  // V3.2 q_lora_rank
constexpr int64_t kLd = kQLora + kIndexHeadDim + kQkDim;
constexpr int32_t kPositions = 4096;

template <typename T>
StatusOr<cuda::DeviceBuffer<T>> upload(const std::vector<T>& h) {
  return cuda::DeviceBuffer<T>::from_host(std::span<const T>(h));
}

Status bench(int32_t tokens) {
  testing::Rng rng(7);
  const std::vector<bf16> rows = rng.bf16_vector(size_t(tokens) * kLd, 2.f);
  const std::vector<bf16> q_w = rng.bf16_vector(kQLora, 0.5f);
  const std::vector<bf16> kv_w = rng.bf16_vector(kLatentDim, 0.5f);
  const std::vector<float> k_w = rng.normal_vector(kIndexHeadDim);
  const std::vector<float> k_b = rng.normal_vector(kIndexHeadDim, 0.3f);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& p : pos) p = int32_t(rng.randint(0, kPositions - 1));
  std::vector<float> cos(size_t(kPositions) * kRopePairs), sin(cos.size());
  DSA_RETURN_IF_ERROR(rope_table_ref({RopeConfig{}, kPositions, cos.data(), sin.data()}));
  DSA_ASSIGN_OR_RETURN(auto drows, upload(rows));
  DSA_ASSIGN_OR_RETURN(auto dq_w, upload(q_w));
  DSA_ASSIGN_OR_RETURN(auto dkv_w, upload(kv_w));
  DSA_ASSIGN_OR_RETURN(auto dk_w, upload(k_w));
  DSA_ASSIGN_OR_RETURN(auto dk_b, upload(k_b));
  DSA_ASSIGN_OR_RETURN(auto dpos, upload(pos));
  DSA_ASSIGN_OR_RETURN(auto dcos, upload(cos));
  DSA_ASSIGN_OR_RETURN(auto dsin, upload(sin));
  DSA_ASSIGN_OR_RETURN(auto dcq, cuda::DeviceBuffer<bf16>::alloc(size_t(tokens) * kQLora));
  DSA_ASSIGN_OR_RETURN(auto dk, cuda::DeviceBuffer<bf16>::alloc(size_t(tokens) * kIndexHeadDim));
  const cudaStream_t stream = cuda::current_stream();

  AttentionPrologueParams p;
  p.num_tokens = tokens;
  p.qa = drows.data();
  p.qa_ld = kLd;
  p.q_a_norm_w = dq_w.data();
  p.cq = dcq.data();
  p.q_lora = kQLora;
  p.k_raw = drows.data() + kQLora;
  p.k_raw_ld = kLd;
  p.latent = drows.data() + kQLora + kIndexHeadDim;
  p.latent_ld = kLd;
  p.kv_a_norm_w = dkv_w.data();
  p.k_norm_w = dk_w.data();
  p.k_norm_b = dk_b.data();
  p.k = dk.data();
  p.index_rope_style = RopeStyle::kNonInterleaved;  // V3.2's indexer_rope_interleave false
  p.positions = dpos.data();
  p.cos = dcos.data();
  p.sin = dsin.data();
  p.num_positions = kPositions;
  DSA_ASSIGN_OR_RETURN(double fused_us,
                       cuda::median_us([&] { return attention_prologue_cuda(p); }, stream));

  RmsNormParams qn;
  qn.x = p.qa;
  qn.x_stride = kLd;
  qn.weight = p.q_a_norm_w;
  qn.y = p.cq;
  qn.num_tokens = tokens;
  qn.dim = kQLora;
  RmsNormParams ln;
  ln.x = p.latent;
  ln.x_stride = kLd;
  ln.weight = p.kv_a_norm_w;
  ln.y = p.latent;
  ln.y_stride = kLd;
  ln.num_tokens = tokens;
  ln.dim = kLatentDim;
  RopeParams lr;
  lr.x = p.latent + kLatentDim;
  lr.positions = p.positions;
  lr.cos = p.cos;
  lr.sin = p.sin;
  lr.num_tokens = tokens;
  lr.token_stride = kLd;
  lr.num_positions = kPositions;
  lr.style = RopeStyle::kInterleaved;
  LayerNormParams kn;
  kn.x = p.k_raw;
  kn.x_stride = kLd;
  kn.weight = p.k_norm_w;
  kn.bias = p.k_norm_b;
  kn.y = p.k;
  kn.num_tokens = tokens;
  kn.dim = kIndexHeadDim;
  RopeParams kr = lr;
  kr.x = p.k;
  kr.token_stride = kIndexHeadDim;
  kr.style = p.index_rope_style;
  const HadamardParams kh{p.k, p.k, tokens};
  const auto unfused = [&]() -> Status {
    DSA_RETURN_IF_ERROR(rmsnorm_cuda(qn));
    DSA_RETURN_IF_ERROR(rmsnorm_cuda(ln));
    DSA_RETURN_IF_ERROR(rope_cuda(lr));
    DSA_RETURN_IF_ERROR(layernorm_cuda(kn));
    DSA_RETURN_IF_ERROR(rope_cuda(kr));
    return hadamard_cuda(kh);
  };
  DSA_ASSIGN_OR_RETURN(double unfused_us, cuda::median_us(unfused, stream));

  const double bytes = double(tokens) * 2.0 * (kQLora + kQkDim + kIndexHeadDim) * sizeof(bf16);
  char what[96];
  std::snprintf(what, sizeof what, "attention_prologue T=%d q_lora=%d fused", tokens, kQLora);
  cuda::print_bandwidth(what, fused_us, bytes);
  std::snprintf(what, sizeof what, "attention_prologue T=%d q_lora=%d unfused (6 ops)", tokens,
                kQLora);
  cuda::print_bandwidth(what, unfused_us, bytes);
  std::printf(
      "attention_prologue T=%d q_lora=%d: fused %.2f us, unfused %.2f us, unfused / fused %.2fx\n",
      tokens, kQLora, fused_us, unfused_us, unfused_us / fused_us);
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  return cuda::run_shapes<int32_t>("attention_prologue_bench", {1, 4, 32, 512}, bench);
}
