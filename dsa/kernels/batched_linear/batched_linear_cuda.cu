// Strided-batched linear layers on the GPU: at T <= 8 tokens, opt-in, the few-token kernel
// (common/few_token_gemv.cuh, every batch in one launch); otherwise one cuBLASLt matmul for every
// batch.
//
// As in linear_cuda.cu, row-major y[T, out] = x[T, in] W[out, in]^T is read column-major as
// y^T[out, T] = op(A) B: A = W's memory as a column-major [in, out] matrix (TRANSA = T, lda = in),
// B = x's memory as [in, T] (ldb = x_ld), C = D = y's memory as [out, T] (ldc = y_ld). The batch
// is CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT with each operand's STRIDED_BATCH_OFFSET, which may be
// smaller than its matrix (the heads of a [T, H, d] activation sit side by side in a row).
// bf16 in and out, fp32 accumulation; split-K only with out-of-place fp32 reductions, so results
// are run-to-run deterministic. The handle and the per-stream workspace are cuda/cublaslt.h's
// (shared with linear); a plan is built once per shape, strides and alignment. If cuBLASLt offers
// no algorithm the simple kernel below runs.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "dsa/cuda/cublaslt.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/batched_linear/batched_linear.h"
#include "dsa/kernels/common/few_token_gemv.cuh"

namespace dsa::kernels {

namespace {

constexpr size_t kWorkspaceBytes = cuda::kCublasLtWorkspaceBytes;

// One thread per output, fp32 accumulation: only for shapes cuBLASLt refuses.
__global__ void batched_linear_simple_kernel(BatchedLinearParams p) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t total = int64_t{p.batch} * p.num_tokens * p.out_features;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = k % p.out_features, bt = k / p.out_features;
    const int64_t t = bt % p.num_tokens, b = bt / p.num_tokens;
    const bf16* x = p.x + b * p.x_batch_stride + t * p.x_ld;
    const bf16* w = p.weight + b * p.w_batch_stride + i * p.in_features;
    float acc = 0.f;
    for (int32_t j = 0; j < p.in_features; ++j)
      acc = fmaf(bf16_to_float(x[j]), bf16_to_float(w[j]), acc);
    p.y[b * p.y_batch_stride + t * p.y_ld + i] = float_to_bf16(acc);
  }
}

Status launch_simple(const BatchedLinearParams& p) {
  constexpr int kThreads = 256;
  const int64_t total = int64_t{p.batch} * p.num_tokens * p.out_features;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535);
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), size_t(0),
                                     cuda::current_stream()},
                   batched_linear_simple_kernel, p));
  return cuda::end_launch("batched_linear_simple", false, "batched_linear");
}

Status lt_status(cublasStatus_t s, const char* call) {
  return cuda::cublaslt_status(s, "batched_linear", call);
}

#define DSA_LT_RETURN_IF_ERROR(call) DSA_RETURN_IF_ERROR(lt_status((call), #call))

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
};

// B, T, in, out, x_ld, x / w / y batch strides, y_ld, alignment of W, x, y (bytes).
using PlanKey = std::tuple<int32_t, int32_t, int32_t, int32_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int, int, int>;

struct LtState {
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

std::mutex g_mutex;
LtState* g_state = nullptr;  // process lifetime; never destroyed (the driver may be gone at exit)

// The alignment every batch's base address keeps: the pointer's, and its strides' in bytes
// (batch b starts at ptr + b * stride, a token's row at + t * ld).
int alignment(const void* ptr, int64_t ld, int64_t batch_stride) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(ptr);
  const uint64_t lb = uint64_t(ld) * sizeof(bf16), sb = uint64_t(batch_stride) * sizeof(bf16);
  int a = 256;
  while (a > 1 && (u % a != 0 || lb % a != 0 || sb % a != 0)) a /= 2;
  return a;
}

// Requires g_mutex held.
LtState& state() {
  if (g_state == nullptr) g_state = new LtState();
  return *g_state;
}

// A [rows, cols] column-major bf16 layout with leading dimension ld, `batch` of them `stride`
// elements apart.
Status make_layout(cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld, int32_t batch,
                   int64_t stride) {
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, uint64_t(rows), uint64_t(cols), ld));
  DSA_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                          &batch, sizeof(batch)));
  return lt_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                    &stride, sizeof(stride)),
                   "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
}

Status build_plan(cublasLtHandle_t handle, const BatchedLinearParams& p, const PlanKey& key,
                  Plan& plan) {
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  DSA_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  DSA_RETURN_IF_ERROR(make_layout(&plan.a, p.in_features, p.out_features, p.in_features, p.batch,
                                  p.w_batch_stride));
  DSA_RETURN_IF_ERROR(
      make_layout(&plan.b, p.in_features, p.num_tokens, p.x_ld, p.batch, p.x_batch_stride));
  DSA_RETURN_IF_ERROR(
      make_layout(&plan.c, p.out_features, p.num_tokens, p.y_ld, p.batch, p.y_batch_stride));

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
  // As linear_cuda.cu: split-K partials in fp32, reduced out of place (no atomics).
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const uint32_t align_a = uint32_t(std::get<9>(key)), align_b = uint32_t(std::get<10>(key));
  const uint32_t align_c = uint32_t(std::get<11>(key));
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
      handle, plan.desc, plan.a, plan.b, plan.c, plan.c, pref.handle, 1, &result, &found);
  // No algorithm (NOT_SUPPORTED, or strides cuBLASLt rejects): the simple kernel takes it.
  plan.has_algo = hs == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.has_algo) plan.algo = result.algo;
  return ok_status();
}

// Runs the matmul through cuBLASLt; *ran = false when it has no algorithm for p.
Status lt_matmul(const BatchedLinearParams& p, bool* ran) {
  const PlanKey key{p.batch,
                    p.num_tokens,
                    p.in_features,
                    p.out_features,
                    p.x_ld,
                    p.x_batch_stride,
                    p.w_batch_stride,
                    p.y_ld,
                    p.y_batch_stride,
                    alignment(p.weight, p.in_features, p.w_batch_stride),
                    alignment(p.x, p.x_ld, p.x_batch_stride),
                    alignment(p.y, p.y_ld, p.y_batch_stride)};
  DSA_ASSIGN_OR_RETURN(const cuda::CublasLt lt, cuda::cublaslt_for(cuda::current_stream()));
  Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    LtState& st = state();
    auto it = st.plans.find(key);
    if (it == st.plans.end()) {
      auto fresh = std::make_unique<Plan>();
      DSA_RETURN_IF_ERROR(build_plan(lt.handle, p, key, *fresh));
      it = st.plans.emplace(key, std::move(fresh)).first;
    }
    plan = it->second.get();
  }
  *ran = plan->has_algo;
  if (!plan->has_algo) return ok_status();
  const float alpha = 1.f, beta = 0.f;
  DSA_LT_RETURN_IF_ERROR(cublasLtMatmul(lt.handle, plan->desc, &alpha, p.weight, plan->a, p.x,
                                        plan->b, &beta, p.y, plan->c, p.y, plan->c, &plan->algo,
                                        lt.workspace, kWorkspaceBytes, cuda::current_stream()));
  return ok_status();
}

}  // namespace

Status batched_linear_cuda(const BatchedLinearParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  few_token_gemv::Args a;
  a.x = p.x, a.w = p.weight, a.y = p.y;
  a.batch = p.batch, a.tokens = p.num_tokens, a.in = p.in_features, a.out = p.out_features;
  a.x_ld = p.x_ld, a.x_bs = p.x_batch_stride, a.w_bs = p.w_batch_stride;
  a.y_ld = p.y_ld, a.y_bs = p.y_batch_stride;
  if (few_token_gemv::supported(a)) return few_token_gemv::run(a);
  bool ran = false;
  DSA_RETURN_IF_ERROR(lt_matmul(p, &ran));
  if (ran) return ok_status();
  return launch_simple(p);
}

}  // namespace dsa::kernels
