// Linear layers y = x W^T on the GPU (SPEC.md §8.8).
//
// bf16 weight, T <= 8 (decode, small verifies), opt-in (DSA_LINEAR_FEW_TOKENS=1): the few-token
// kernel (common/few_token_gemv.cuh).
// bf16 weight otherwise: cuBLASLt, bf16 x bf16 with fp32 accumulation, bf16 or fp32 output.
// Row-major
//   y[T, out] = x[T, in] W[out, in]^T is, read column-major, y^T[out, T] = op(A) B with A = W's
//   memory as a column-major [in, out] matrix, op = transpose (TRANSA = T), and B = x's memory as
//   a column-major [in, T] matrix (TRANSB = N): m = out, n = T, k = in, lda = ldb = in,
//   ldc = ldd = out. The handle and a 32 MiB workspace per stream are cuda/cublaslt.h's (shared
//   with batched_linear); the matmul plan (descriptors + heuristic algorithm) is cached per shape
//   and pointer alignment, so a call costs one cublasLtMatmul. Split-K is allowed only with
//   out-of-place fp32 reductions (in-place ones use atomics), so results are run-to-run
//   deterministic. If cuBLASLt offers no algorithm, the simple kernel below runs.
// FP8 weight (e4m3 + 128x128 block scales): the tokens are quantised per (token, 128 columns)
//   with the reference's power-of-two rule into per-stream scratch (linear_fp8_cuda.h), then
//   - fewer than lt_min_tokens() tokens (decode, verify): the few-token wgmma kernel
//     (linear_fp8_wgmma.cuh), 64 tokens per launch;
//   - more: cuBLASLt's block-scaled FP8 GEMM for the first T - T % 4 tokens (the weight as A with
//     CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, its scales in the checkpoint's own
//     [out/128][in/128] order; the tokens as B with VEC128_32F, scales [in/128][T]: found by
//     trying each order against the reference, tools/probe_fp8_blockscale.cu), the last T % 4
//     by the wgmma kernel (cuBLASLt 13.1 offers no algorithm for n % 4 != 0, and computes wrong
//     sums when in / 128 is odd; shapes other than whole blocks, a multiple of 4 of them, stay on
//     the wgmma kernel).
//   Checked mode, and shapes the copy engine cannot stream (in % 16 != 0), take the simple fused
//   kernel below, which checks every input.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "dsa/core/checked_mode.h"
#include "dsa/core/dtype.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/cuda/cublaslt.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/few_token_gemv.cuh"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/linear/linear_fp8_cuda.h"

namespace dsa::kernels {

namespace {

// ---------------------------------------------------------------------------------------------
// Simple kernel: one block computes y[t0 : t0 + 8, i0 : i0 + 64]
// ---------------------------------------------------------------------------------------------

constexpr int kTileOut = 64;   // outputs per block (within one 128-row weight block)
constexpr int kTileTok = 8;    // tokens per block (one warp quantises one token's block)
constexpr int kThreads = 256;  // 8 warps; thread = (output o = tid % 64, token pair tid / 64)
constexpr int kTokPerThread = kTileTok / (kThreads / kTileOut);  // 2

// For each 128-column block k: the weight tile [64, 128] is dequantised (e4m3 * 1, the block
// scale applied later) or upcast into shared memory, each warp loads one token's 128 values and
// (FP8) quantises them with the power-of-two rule, then every thread takes two 128-long fp32 dot
// products and adds sx * sw * dot (FP8) or dot (bf16) to its accumulators.
template <bool kFp8>
__global__ void __launch_bounds__(kThreads)
    linear_simple_kernel(LinearParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ float ws[kTileOut][kLinearBlock + 1];  // +1: rows in different banks
  __shared__ float xs[kTileTok][kLinearBlock];
  __shared__ float sx[kTileTok];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t t0 = int64_t{blockIdx.x} * kTileTok;
  const int32_t i0 = static_cast<int32_t>(blockIdx.y) * kTileOut;
  const int32_t in = p.in_features, out = p.out_features;
  const int32_t kblocks = (in + kLinearBlock - 1) / kLinearBlock;
  const int o = tid % kTileOut, tok_base = (tid / kTileOut) * kTokPerThread;
  float acc[kTokPerThread] = {};

  for (int32_t kb = 0; kb < kblocks; ++kb) {
    const int32_t j0 = kb * kLinearBlock, m = min(kLinearBlock, in - j0);
    __syncthreads();  // the previous block's tiles are no longer read
    for (int idx = tid; idx < kTileOut * kLinearBlock; idx += kThreads) {
      const int r = idx / kLinearBlock, c = idx % kLinearBlock;
      const int32_t i = i0 + r;
      float v = 0.f;
      if (i < out && c < m) {
        const int64_t at = int64_t{i} * in + j0 + c;
        v = kFp8 ? e4m3_to_float(e4m3{p.weight_fp8[at]}) : bf16_to_float(p.weight[at]);
      }
      ws[r][c] = v;
    }
    {  // warp `warp` loads (and for FP8 quantises) token t0 + warp's columns [j0, j0 + m)
      const int64_t t = t0 + warp;
      float v[4];
      float amax = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int c = lane * 4 + k;
        v[k] = (t < p.num_tokens && c < m) ? bf16_to_float(p.x[t * in + j0 + c]) : 0.f;
        if (kFp8) {
          if (!isfinite(v[k]))
            cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                                      static_cast<int32_t>(t), j0 + c);
          const float a = fabsf(v[k]);
          amax = a > amax ? a : amax;  // quantize_block_pow2's rule (a NaN never wins)
        }
      }
      if (kFp8) {
        for (int s = 16; s > 0; s >>= 1) {
          const float other = __shfl_xor_sync(0xFFFFFFFFu, amax, s);
          amax = other > amax ? other : amax;
        }
        const int32_t e = pow2_scale_exponent(amax);
        const float inv = pow2_float(-e);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          float y = v[k] * inv;  // exact: a power of two
          y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
          v[k] = e4m3_to_float(float_to_e4m3(y));
        }
        if (lane == 0) sx[warp] = pow2_float(e);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) xs[warp][lane * 4 + k] = v[k];
    }
    float sw = 1.f;
    if (kFp8) {
      const int64_t at = int64_t{i0 / kLinearBlock} * kblocks + kb;
      sw = p.weight_scale_inv[at];
      if (tid == 0 && !isfinite(sw))
        cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                                  static_cast<int32_t>(at), 0);
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTokPerThread; ++q) {
      const int tl = tok_base + q;
      float dot = 0.f;
#pragma unroll 8
      for (int c = 0; c < kLinearBlock; ++c) dot = fmaf(xs[tl][c], ws[o][c], dot);
      acc[q] = kFp8 ? fmaf(sx[tl] * sw, dot, acc[q]) : acc[q] + dot;
    }
  }
  const int32_t i = i0 + o;
  if (i >= out) return;
#pragma unroll
  for (int q = 0; q < kTokPerThread; ++q) {
    const int64_t t = t0 + tok_base + q;
    if (t >= p.num_tokens) continue;
    if (p.y != nullptr) {
      p.y[t * out + i] = float_to_bf16(acc[q]);
    } else {
      p.y_f32[t * out + i] = acc[q];
    }
  }
}

// The fused kernel for FP8 weights (and bf16 weights cuBLASLt has no algorithm for). A non-null
// `err` means a checked FP8 launch: its device checks are collected before returning.
Status launch_simple(const LinearParams& p, cuda::DeviceErrorWord* err) {
  const int64_t tok_tiles = (int64_t{p.num_tokens} + kTileTok - 1) / kTileTok;
  const int64_t out_tiles = (int64_t{p.out_features} + kTileOut - 1) / kTileOut;
  if (out_tiles > 65535) return invalid_argument("linear: out_features above 4194240");
  const dim3 grid(static_cast<unsigned>(tok_tiles), static_cast<unsigned>(out_tiles));
  if (p.weight_fp8 != nullptr) {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(grid), dim3(kThreads), size_t(0), cuda::current_stream()},
        linear_simple_kernel<true>, p, err));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(grid), dim3(kThreads), size_t(0), cuda::current_stream()},
        linear_simple_kernel<false>, p, err));
  }
  return cuda::end_launch(
      "linear_simple", err != nullptr,
      "linear (fp8): non-finite x[row][value], or weight_scale_inv[row] non-finite");
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt (bf16 weights)
// ---------------------------------------------------------------------------------------------

constexpr size_t kWorkspaceBytes = cuda::kCublasLtWorkspaceBytes;

#define DSA_LT_RETURN_IF_ERROR(call) \
  DSA_RETURN_IF_ERROR(cuda::cublaslt_status((call), "linear", #call))

// One cached matmul: descriptors and the chosen algorithm (has_algo false: none was offered).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
};

// T, in, out, fp32 output, alignment of W, x, y (bytes, capped at 256), FP8 block-scaled.
using PlanKey = std::tuple<int32_t, int32_t, int32_t, bool, int, int, int, bool>;

// The handle and the per-stream workspaces are cuda/cublaslt.h's, shared with batched_linear.
struct LtState {
  cublasLtHandle_t handle = nullptr;
  // One FP8 scratch per stream: two streams running GEMMs at once must not share it.
  std::map<cudaStream_t, linear_fp8::Scratch> fp8_scratch;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

std::mutex g_lt_mutex;
LtState* g_lt = nullptr;  // process lifetime; never destroyed (the driver may be gone at exit)

int alignment(const void* ptr) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(ptr);
  int a = 256;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

// Requires g_lt_mutex held.
StatusOr<LtState*> lt_state() {
  if (g_lt != nullptr) return g_lt;
  auto state = std::make_unique<LtState>();
  DSA_ASSIGN_OR_RETURN(const cuda::CublasLt lt, cuda::cublaslt_for(cuda::current_stream()));
  state->handle = lt.handle;
  g_lt = state.release();
  return g_lt;
}

// Requires g_lt_mutex held.
StatusOr<linear_fp8::Scratch> fp8_scratch_for(LtState& st, cudaStream_t stream) {
  auto it = st.fp8_scratch.find(stream);
  if (it != st.fp8_scratch.end()) return it->second;
  DSA_ASSIGN_OR_RETURN(linear_fp8::Scratch s, linear_fp8::allocate_scratch());
  st.fp8_scratch.emplace(stream, s);
  return s;
}

// Sets the FP8 descriptor's scale pointers: before the heuristic query (cuBLASLt offers no
// block-scaled algorithm while they are unset) and before each call (each has its own).
Status set_scale_pointers(cublasLtMatmulDesc_t desc, const float* weight_scales,
                          const float* token_scales) {
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                        &weight_scales, sizeof(weight_scales)));
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                        &token_scales, sizeof(token_scales)));
  return ok_status();
}

// fp8_token_scales: the FP8 call's token scales (cuBLASLt offers no block-scaled algorithm while
// the scale pointers are unset; each call sets its own before running).
Status build_plan(LtState& st, const LinearParams& p, const PlanKey& key, Plan& plan,
                  const float* fp8_token_scales = nullptr) {
  const auto out_type = p.y_f32 != nullptr ? CUDA_R_32F : CUDA_R_16BF;
  const bool fp8 = std::get<7>(key);
  const auto in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (fp8) {
    const cublasLtMatmulMatrixScale_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                      token_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    DSA_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weight_mode, sizeof(weight_mode)));
    DSA_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &token_mode, sizeof(token_mode)));
    DSA_RETURN_IF_ERROR(set_scale_pointers(plan.desc, p.weight_scale_inv, fp8_token_scales));
  }
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Stored shapes (column-major): W is [in, out], x is [in, T], y is [out, T].
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan.a, in_type, p.in_features, p.out_features, p.in_features));
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan.b, in_type, p.in_features, p.num_tokens, p.in_features));
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan.c, out_type, p.out_features, p.num_tokens, p.out_features));

  struct PrefGuard {
    cublasLtMatmulPreference_t handle = nullptr;
    ~PrefGuard() {
      if (handle != nullptr) cublasLtMatmulPreferenceDestroy(handle);
    }
  } pref;
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref.handle));
  const uint64_t ws = kWorkspaceBytes;
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // Split-K only with fp32 partials reduced out of place: in-place reductions use atomics (not
  // run-to-run deterministic) and output-type reductions round partial sums to bf16.
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const uint32_t align_a = static_cast<uint32_t>(std::get<4>(key));
  const uint32_t align_b = static_cast<uint32_t>(std::get<5>(key));
  const uint32_t align_c = static_cast<uint32_t>(std::get<6>(key));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> attrs[] = {
      {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c}};
  for (const auto& [attr, value] : attrs) {
    DSA_LT_RETURN_IF_ERROR(
        cublasLtMatmulPreferenceSetAttribute(pref.handle, attr, value, sizeof(uint32_t)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
      st.handle, plan.desc, plan.a, plan.b, plan.c, plan.c, pref.handle, 1, &result, &found);
  // No algorithm for this shape (NOT_SUPPORTED, or a layout cuBLASLt rejects): the simple kernel
  // takes it; it is correct for every shape.
  plan.has_algo = hs == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.has_algo) plan.algo = result.algo;
  return ok_status();
}

void* output_of(const LinearParams& p) {
  return p.y_f32 != nullptr ? static_cast<void*>(p.y_f32) : static_cast<void*>(p.y);
}

struct PlanRef {
  LtState* st = nullptr;
  Plan* plan = nullptr;
  void* workspace = nullptr;
};

// The cached plan of p's GEMM with operands `weight` and `x` (bf16, or FP8 when token_scales is
// set), built on first use, and the current stream's workspace. Requires g_lt_mutex held.
StatusOr<PlanRef> plan_for(const LinearParams& p, const void* weight, const void* x,
                           const float* token_scales) {
  const PlanKey key{
      p.num_tokens,      p.in_features, p.out_features,          p.y_f32 != nullptr,
      alignment(weight), alignment(x),  alignment(output_of(p)), token_scales != nullptr};
  PlanRef r;
  DSA_ASSIGN_OR_RETURN(r.st, lt_state());
  DSA_ASSIGN_OR_RETURN(const cuda::CublasLt lt, cuda::cublaslt_for(cuda::current_stream()));
  r.workspace = lt.workspace;
  auto it = r.st->plans.find(key);
  if (it == r.st->plans.end()) {
    auto fresh = std::make_unique<Plan>();
    DSA_RETURN_IF_ERROR(build_plan(*r.st, p, key, *fresh, token_scales));
    it = r.st->plans.emplace(key, std::move(fresh)).first;
  }
  r.plan = it->second.get();
  return r;
}

// Runs the bf16 GEMM through cuBLASLt; *ran = false when cuBLASLt has no algorithm for it.
Status lt_matmul(const LinearParams& p, bool* ran) {
  PlanRef r;
  {
    std::lock_guard<std::mutex> lock(g_lt_mutex);
    DSA_ASSIGN_OR_RETURN(r, plan_for(p, p.weight, p.x, nullptr));
  }
  const Plan& plan = *r.plan;
  *ran = plan.has_algo;
  if (!plan.has_algo) return ok_status();
  const float alpha = 1.f, beta = 0.f;
  void* y = output_of(p);
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmul(r.st->handle, plan.desc, &alpha, p.weight, plan.a, p.x,
                                        plan.b, &beta, y, plan.c, y, plan.c, &plan.algo,
                                        r.workspace, kWorkspaceBytes, cuda::current_stream()));
  return ok_status();
}

// The block-scaled FP8 GEMM through cuBLASLt for p's rows, from tokens quantised into x8 / sx
// (sx[k * T + t]); *ran = false when cuBLASLt has no algorithm for the shape.
Status lt_fp8_matmul(const LinearParams& p, const uint8_t* x8, const float* sx, bool* ran) {
  // Held through the call: the scale pointers are attributes of the shared descriptor.
  std::lock_guard<std::mutex> lock(g_lt_mutex);
  DSA_ASSIGN_OR_RETURN(const PlanRef r, plan_for(p, p.weight_fp8, x8, sx));
  const Plan& plan = *r.plan;
  *ran = plan.has_algo;
  if (!plan.has_algo) return ok_status();
  DSA_RETURN_IF_ERROR(set_scale_pointers(plan.desc, p.weight_scale_inv, sx));
  const float alpha = 1.f, beta = 0.f;
  void* y = output_of(p);
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmul(r.st->handle, plan.desc, &alpha, p.weight_fp8, plan.a, x8,
                                        plan.b, &beta, y, plan.c, y, plan.c, &plan.algo,
                                        r.workspace, kWorkspaceBytes, cuda::current_stream()));
  return ok_status();
}

// The fewest tokens for which cuBLASLt takes the FP8 GEMM: below it the wgmma kernel (one weight
// pass per 64 tokens) is faster. DSA_FP8_LINEAR_LT_MIN_TOKENS overrides it (benchmarks of the
// crossover; read once).
int32_t lt_min_tokens() {
  static const int32_t value = [] {
    const char* env = std::getenv("DSA_FP8_LINEAR_LT_MIN_TOKENS");
    const long v = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
    return v >= 4 && v <= (1L << 30) ? static_cast<int32_t>(v) : int32_t{32};
  }();
  return value;
}

// p restricted to its rows [row0, row0 + rows).
LinearParams rows_of(const LinearParams& p, int32_t row0, int32_t rows) {
  LinearParams q = p;
  q.x = p.x + int64_t{row0} * p.in_features;
  if (p.y != nullptr) q.y = p.y + int64_t{row0} * p.out_features;
  if (p.y_f32 != nullptr) q.y_f32 = p.y_f32 + int64_t{row0} * p.out_features;
  q.num_tokens = rows;
  return q;
}

// Tokens per quantisation pass: as many whole `multiple`s as the scratch holds (at least 64: see
// fast_path_supported).
int32_t rows_per_pass(const linear_fp8::Scratch& s, int32_t in, int32_t multiple) {
  return static_cast<int32_t>(int64_t(s.x8_bytes) / in / multiple * multiple);
}

// Rows [row0, row0 + rows) by the few-token kernel: in one fused launch where it takes them
// (linear_fp8::fused_plan), else 64 at a time, quantised in passes that fit the scratch.
Status fp8_small_rows(const LinearParams& p, int32_t row0, int32_t rows,
                      const linear_fp8::Scratch& s) {
  const LinearParams few = rows_of(p, row0, rows);
  if (const auto plan = linear_fp8::fused_plan(few, rows, s)) {
    return linear_fp8::fused_small_gemm(few, *plan);
  }
  const int32_t in = p.in_features;
  const int32_t pass = rows_per_pass(s, in, linear_fp8::kSmallMaxRows);
  for (int32_t r0 = row0; r0 < row0 + rows; r0 += pass) {
    const int32_t n = std::min(pass, row0 + rows - r0);
    DSA_RETURN_IF_ERROR(linear_fp8::quantize_tokens(p.x + int64_t{r0} * in, n, in, s.x8, s.sx));
    for (int32_t c = 0; c < n; c += linear_fp8::kSmallMaxRows) {
      const int32_t m = std::min(linear_fp8::kSmallMaxRows, n - c);
      DSA_RETURN_IF_ERROR(
          linear_fp8::small_gemm(rows_of(p, r0 + c, m), m, s.x8 + int64_t{c} * in, s.sx + c, n, s));
    }
  }
  return ok_status();
}

Status fp8_fast(const LinearParams& p) {
  linear_fp8::Scratch s;
  {
    std::lock_guard<std::mutex> lock(g_lt_mutex);
    DSA_ASSIGN_OR_RETURN(LtState * st, lt_state());
    DSA_ASSIGN_OR_RETURN(s, fp8_scratch_for(*st, cuda::current_stream()));
  }
  const int32_t T = p.num_tokens, in = p.in_features;
  // cuBLASLt only where the probe showed it right (linear_lt_shape_supported).
  const bool lt_shape = linear_lt_shape_supported(in);
  const int32_t lt_rows = (T >= lt_min_tokens() && lt_shape) ? T - T % 4 : 0;
  const int32_t pass = rows_per_pass(s, in, 4);  // cuBLASLt takes T % 4 == 0
  for (int32_t r0 = 0; r0 < lt_rows; r0 += pass) {
    const int32_t n = std::min(pass, lt_rows - r0);
    DSA_RETURN_IF_ERROR(linear_fp8::quantize_tokens(p.x + int64_t{r0} * in, n, in, s.x8, s.sx));
    bool ran = false;
    DSA_RETURN_IF_ERROR(lt_fp8_matmul(rows_of(p, r0, n), s.x8, s.sx, &ran));
    if (!ran) DSA_RETURN_IF_ERROR(fp8_small_rows(p, r0, n, s));
  }
  if (lt_rows < T) DSA_RETURN_IF_ERROR(fp8_small_rows(p, lt_rows, T - lt_rows, s));
  return ok_status();
}

}  // namespace

Status linear_cuda(const LinearParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  if (p.weight != nullptr) {
    few_token_gemv::Args a;
    a.x = p.x, a.w = p.weight, a.y = p.y, a.y_f32 = p.y_f32;
    a.tokens = p.num_tokens, a.in = p.in_features, a.out = p.out_features;
    a.x_ld = p.in_features, a.y_ld = p.out_features;
    if (few_token_gemv::supported(a)) return few_token_gemv::run(a);
    bool ran = false;
    DSA_RETURN_IF_ERROR(lt_matmul(p, &ran));
    if (ran) return ok_status();
    return launch_simple(p, nullptr);
  }
  const bool checked = checked_mode();
  if (!checked && linear_fp8::fast_path_supported(p)) return fp8_fast(p);
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  return launch_simple(p, err);
}

bool linear_lt_shape_supported(int32_t in_features) {
  return in_features % kLinearBlock == 0 && (in_features / kLinearBlock) % 4 == 0;
}

Status linear_fp8_prequantized_cuda(const LinearParams& p, const uint8_t* x8, const float* sx,
                                    bool* ran) {
  return lt_fp8_matmul(p, x8, sx, ran);
}

}  // namespace dsa::kernels
