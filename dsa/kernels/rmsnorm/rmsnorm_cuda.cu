// RMSNorm and the residual add on the GPU (SPEC.md §8.3, §8.6).
//   rmsnorm:      one block per row; the row is read once into registers (16-byte vectors when
//                 the row layout allows it), sum of squares in fp32 with a fixed reduction tree
//                 (deterministic), then y = x * inv_rms * w in fp32, rounded once to bf16.
//                 With x_rows each block first finds its gathered row (zeros for a bad entry).
//   residual_add: elementwise h = bf16(float(h) + float(x)), one fp32 add (no contraction is
//                 possible: there is no product), one RNE rounding: bit-identical to the CPU.
//   add_rmsnorm:  the two in one kernel: each block adds its row, stores the rounded sums to h
//                 and normalises them with rmsnorm's own row code and launch shape, so h and y
//                 are bit-identical to residual_add_cuda followed by rmsnorm_cuda.
//   rmsnorm_pair: two gathered norms of one shape in one grid (blockIdx.y picks the norm), each
//                 row by rmsnorm's gathered row code: bit-identical to two rmsnorm_cuda calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/rmsnorm_row.cuh"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

namespace {

using rmsnorm_dev::block_sum;
using rmsnorm_dev::inv_rms;
using rmsnorm_dev::kVecElems;
using rmsnorm_dev::norm_row_vec;
using rmsnorm_dev::norm_shape;
using rmsnorm_dev::NormInput;
using rmsnorm_dev::NormShape;

// h + a in fp32, rounded once (RNE): residual_add's rule. __fadd_rn keeps the add out of any
// contraction, so every kernel here that adds rounds the same bits.
__device__ __forceinline__ bf16 add_rounded(bf16 h, bf16 a) {
  return float_to_bf16(__fadd_rn(bf16_to_float(h), bf16_to_float(a)));
}

// Where a norm kernel's row comes from. The row bodies (norm_row_vec in rmsnorm_row.cuh,
// norm_row_scalar below) are written once over a source, so add_rmsnorm runs rmsnorm's very
// reduction and its y is rmsnorm's y on the h it leaves, bit for bit (what the unfused pair would
// give).
//   NormInput:  rmsnorm's x, read as it is (rmsnorm_row.cuh).
//   AddedInput: add_rmsnorm's h + add, each element rounded once and stored back to h as it is
//               read, so the norm sees exactly the values residual_add leaves in h.
// vec(t, v) is vector v (8 elements) of row t; first(t, d) element d, read by the thread that
// owns it; again(t, d) the same element in the scalar kernel's second pass, by the same thread.
struct AddedInput {
  bf16* h;
  const bf16* add;
  int64_t stride;  // D: h and add are dense [T, D]
  // add 16-byte aligned. The kernel path is chosen on h, y and w alone (as rmsnorm_cuda chooses
  // it on the updated h), so an unaligned add must not move it: its 8 values are then read singly.
  bool add_vec;
  __device__ uint4 vec(int64_t t, int32_t v) const {
    uint4* hv = reinterpret_cast<uint4*>(h + t * stride) + v;
    const bf16* ar = add + t * stride + int64_t{v} * kVecElems;
    uint4 a = *hv, b;
    bf16* be = reinterpret_cast<bf16*>(&b);
    if (add_vec) {
      b = *reinterpret_cast<const uint4*>(ar);
    } else {
#pragma unroll
      for (int j = 0; j < kVecElems; ++j) be[j] = ar[j];
    }
    bf16* ae = reinterpret_cast<bf16*>(&a);
#pragma unroll
    for (int j = 0; j < kVecElems; ++j) ae[j] = add_rounded(ae[j], be[j]);
    *hv = a;
    return a;
  }
  __device__ bf16 first(int64_t t, int32_t d) const {
    const int64_t i = t * stride + d;
    const bf16 s = add_rounded(h[i], add[i]);
    h[i] = s;
    return s;
  }
  // Stored by this thread in its first pass: read back, not added a second time.
  __device__ bf16 again(int64_t t, int32_t d) const { return h[t * stride + d]; }
};

// rmsnorm's gathered input (x_rows): the row a block's entry selects, or zeros where the entry is
// out of range (as if gathered into a zero-filled buffer), each element also stored to the copy
// row when there is one (the embedding output the residual stream starts from).
struct GatheredInput {
  const bf16* row;  // nullptr: the entry is out of range, the row reads as zeros
  bf16* copy;       // nullptr: no copy; else this block's row of x_copy
  __device__ uint4 vec(int64_t, int32_t v) const {
    const uint4 a =
        row != nullptr ? reinterpret_cast<const uint4*>(row)[v] : make_uint4(0, 0, 0, 0);
    if (copy != nullptr) reinterpret_cast<uint4*>(copy)[v] = a;
    return a;
  }
  __device__ bf16 first(int64_t, int32_t d) const {
    const bf16 a = row != nullptr ? row[d] : bf16{};
    if (copy != nullptr) copy[d] = a;
    return a;
  }
  __device__ bf16 again(int64_t, int32_t d) const { return row != nullptr ? row[d] : bf16{}; }
};

// The row a gathered norm's block reads (GatheredInput), its error reported once by thread 0.
struct Gather {
  const int32_t* rows;
  int32_t bound;
  bool skip_minus_one;
  bf16* copy;  // x_copy, row stride dim
  cuda::DeviceErrorWord* err;
  __device__ GatheredInput input(const bf16* x, int64_t x_stride, int32_t dim) const {
    const int64_t t = blockIdx.x;
    const int32_t r = rows[t];
    const bool valid = r >= 0 && r < bound;
    if (!valid && !(skip_minus_one && r == -1) && threadIdx.x == 0) {
      cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                                static_cast<int32_t>(t), r);
    }
    return GatheredInput{valid ? x + int64_t{r} * x_stride : nullptr,
                         copy != nullptr ? copy + t * dim : nullptr};
  }
};

// Any layout (odd D, unaligned strides or pointers): one block per row, scalar loads, two passes.
// Thread i reads and writes only elements i, i + blockDim, ..., so y may alias rmsnorm's x.
template <typename Input>
__device__ __forceinline__ void norm_row_scalar(const Input& in, const bf16* __restrict__ w,
                                                bf16* y, int32_t dim, int64_t y_stride, float eps) {
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  float sum_sq = 0.f;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const float f = bf16_to_float(in.first(t, d));
    sum_sq = fmaf(f, f, sum_sq);
  }
  const float r = inv_rms(block_sum(sum_sq, scratch), dim, eps);
  bf16* yr = y + t * y_stride;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x)
    yr[d] = float_to_bf16(bf16_to_float(in.again(t, d)) * r * bf16_to_float(w[d]));
}

// The kernels: one per op and path (so each has its own name in a profile), each the PDL prologue
// and then the shared row body.
template <int kVec>
__global__ void __launch_bounds__(1024)
    rmsnorm_vec_kernel(const bf16* x, const bf16* __restrict__ w, bf16* y, int32_t nvec,
                       int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  norm_row_vec<kVec>(NormInput{x, x_stride}, w, y, nvec, y_stride, eps, blockIdx.x, blockDim.x);
}

__global__ void __launch_bounds__(1024)
    rmsnorm_scalar_kernel(const bf16* x, const bf16* __restrict__ w, bf16* y, int32_t dim,
                          int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  norm_row_scalar(NormInput{x, x_stride}, w, y, dim, y_stride, eps);
}

template <int kVec>
__global__ void __launch_bounds__(1024)
    rmsnorm_gather_vec_kernel(const bf16* x, Gather g, const bf16* __restrict__ w, bf16* y,
                              int32_t nvec, int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  norm_row_vec<kVec>(g.input(x, x_stride, nvec * kVecElems), w, y, nvec, y_stride, eps, blockIdx.x,
                     blockDim.x);
}

__global__ void __launch_bounds__(1024)
    rmsnorm_gather_scalar_kernel(const bf16* x, Gather g, const bf16* __restrict__ w, bf16* y,
                                 int32_t dim, int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  norm_row_scalar(g.input(x, x_stride, dim), w, y, dim, y_stride, eps);
}

// One gathered norm of rmsnorm_pair_cuda's launch: what rmsnorm_gather_vec_kernel takes.
struct GatheredNorm {
  const bf16* x;
  Gather g;
  const bf16* w;
  bf16* y;
  int64_t x_stride, y_stride;
  float eps;
};

// Two gathered norms of one shape, grid.y = 2: row blockIdx.x of norm blockIdx.y, by
// rmsnorm_gather_vec_kernel's row code (so each y is bit-identical to that kernel's).
template <int kVec>
__global__ void __launch_bounds__(1024)
    rmsnorm_gather_pair_vec_kernel(GatheredNorm first, GatheredNorm second, int32_t nvec) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const GatheredNorm n = blockIdx.y == 0 ? first : second;
  norm_row_vec<kVec>(n.g.input(n.x, n.x_stride, nvec * kVecElems), n.w, n.y, nvec, n.y_stride,
                     n.eps, blockIdx.x, blockDim.x);
}

template <int kVec>
__global__ void __launch_bounds__(1024)
    add_rmsnorm_vec_kernel(bf16* h, const bf16* add, bool add_vec, const bf16* __restrict__ w,
                           bf16* y, int32_t nvec, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  norm_row_vec<kVec>(AddedInput{h, add, int64_t{nvec} * kVecElems, add_vec}, w, y, nvec, y_stride,
                     eps, blockIdx.x, blockDim.x);
}

__global__ void __launch_bounds__(1024)
    add_rmsnorm_scalar_kernel(bf16* h, const bf16* add, const bf16* __restrict__ w, bf16* y,
                              int32_t dim, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  norm_row_scalar(AddedInput{h, add, dim, false}, w, y, dim, y_stride, eps);
}

// h[i] = bf16(float(h[i]) + float(x[i])) for i in [0, n); 8 elements per thread per step when
// `vec` (n % 8 == 0 and both pointers 16-byte aligned).
__global__ void residual_add_kernel(bf16* h, const bf16* __restrict__ x, int64_t n, bool vec) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vec) {
    uint4* hv = reinterpret_cast<uint4*>(h);
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (int64_t i = first; i < n / kVecElems; i += stride) {
      uint4 a = hv[i];
      const uint4 b = xv[i];
      bf16* ae = reinterpret_cast<bf16*>(&a);
      const bf16* be = reinterpret_cast<const bf16*>(&b);
#pragma unroll
      for (int j = 0; j < kVecElems; ++j) ae[j] = add_rounded(ae[j], be[j]);
      hv[i] = a;
    }
    return;
  }
  for (int64_t i = first; i < n; i += stride) h[i] = add_rounded(h[i], x[i]);
}

cuda::LaunchShape launch_shape(int32_t rows, const NormShape& s) {
  return cuda::LaunchShape{dim3(rows), dim3(s.threads), size_t(0), cuda::current_stream()};
}

template <int kVec>
cudaError_t launch_rmsnorm_vec(const RmsNormParams& p, const NormShape& s, int64_t xs, int64_t ys) {
  return cuda::launch(launch_shape(p.num_tokens, s), rmsnorm_vec_kernel<kVec>, p.x, p.weight, p.y,
                      p.dim / kVecElems, xs, ys, p.eps);
}

template <int kVec>
cudaError_t launch_rmsnorm_gather_vec(const RmsNormParams& p, const NormShape& s, const Gather& g,
                                      int64_t xs, int64_t ys) {
  return cuda::launch(launch_shape(p.num_tokens, s), rmsnorm_gather_vec_kernel<kVec>, p.x, g,
                      p.weight, p.y, p.dim / kVecElems, xs, ys, p.eps);
}

template <int kVec>
cudaError_t launch_rmsnorm_gather_pair_vec(int32_t rows, const NormShape& s,
                                           const GatheredNorm& first, const GatheredNorm& second,
                                           int32_t nvec) {
  cuda::LaunchShape shape = launch_shape(rows, s);
  shape.grid.y = 2;
  return cuda::launch(shape, rmsnorm_gather_pair_vec_kernel<kVec>, first, second, nvec);
}

template <int kVec>
cudaError_t launch_add_rmsnorm_vec(const AddRmsNormParams& p, const NormShape& s, int64_t ys) {
  return cuda::launch(launch_shape(p.num_tokens, s), add_rmsnorm_vec_kernel<kVec>, p.h, p.add,
                      cuda::is_aligned(p.add, 16), p.weight, p.y, p.dim / kVecElems, ys, p.eps);
}

// The vector launchers by NormShape::slot.
constexpr cudaError_t (*kRmsNormVec[])(const RmsNormParams&, const NormShape&, int64_t, int64_t) = {
    launch_rmsnorm_vec<1>, launch_rmsnorm_vec<2>, launch_rmsnorm_vec<4>, launch_rmsnorm_vec<8>};
constexpr cudaError_t (*kRmsNormGatherVec[])(const RmsNormParams&, const NormShape&, const Gather&,
                                             int64_t, int64_t) = {
    launch_rmsnorm_gather_vec<1>, launch_rmsnorm_gather_vec<2>, launch_rmsnorm_gather_vec<4>,
    launch_rmsnorm_gather_vec<8>};
constexpr cudaError_t (*kRmsNormGatherPairVec[])(int32_t, const NormShape&, const GatheredNorm&,
                                                 const GatheredNorm&, int32_t) = {
    launch_rmsnorm_gather_pair_vec<1>, launch_rmsnorm_gather_pair_vec<2>,
    launch_rmsnorm_gather_pair_vec<4>, launch_rmsnorm_gather_pair_vec<8>};
constexpr cudaError_t (*kAddRmsNormVec[])(const AddRmsNormParams&, const NormShape&, int64_t) = {
    launch_add_rmsnorm_vec<1>, launch_add_rmsnorm_vec<2>, launch_add_rmsnorm_vec<4>,
    launch_add_rmsnorm_vec<8>};

}  // namespace

Status rmsnorm_cuda(const RmsNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t xs = p.x_stride == 0 ? p.dim : p.x_stride;
  const int64_t ys = p.y_stride == 0 ? p.dim : p.y_stride;
  const NormShape s = norm_shape(p.dim, xs, ys, p.x, p.y, p.weight, p.x_copy);
  if (p.x_rows != nullptr) {
    const bool checked = checked_mode();
    DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
    const Gather g{p.x_rows, p.x_row_bound, p.skip_minus_one, p.x_copy, err};
    if (s.vec) {
      DSA_CUDA_RETURN_IF_ERROR(kRmsNormGatherVec[s.slot](p, s, g, xs, ys));
    } else {
      DSA_CUDA_RETURN_IF_ERROR(cuda::launch(launch_shape(p.num_tokens, s),
                                            rmsnorm_gather_scalar_kernel, p.x, g, p.weight, p.y,
                                            p.dim, xs, ys, p.eps));
    }
    return cuda::end_launch("rmsnorm", checked, "rmsnorm: x_rows[row] outside [0, x_row_bound)");
  }
  if (s.vec) {
    DSA_CUDA_RETURN_IF_ERROR(kRmsNormVec[s.slot](p, s, xs, ys));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(launch_shape(p.num_tokens, s), rmsnorm_scalar_kernel, p.x,
                                          p.weight, p.y, p.dim, xs, ys, p.eps));
  }
  return cuda::launch_error("rmsnorm");
}

Status rmsnorm_pair_cuda(const RmsNormParams& first, const RmsNormParams& second) {
  DSA_RETURN_IF_ERROR(validate_pair(first, second));
  if (first.num_tokens == 0) return ok_status();
  const auto shape_of = [](const RmsNormParams& p) {
    const int64_t xs = p.x_stride == 0 ? p.dim : p.x_stride;
    const int64_t ys = p.y_stride == 0 ? p.dim : p.y_stride;
    return norm_shape(p.dim, xs, ys, p.x, p.y, p.weight, p.x_copy);
  };
  const NormShape s = shape_of(first), t = shape_of(second);
  const bool one_launch = first.x_rows != nullptr && second.x_rows != nullptr && s.vec && t.vec &&
                          s.threads == t.threads && s.slot == t.slot;
  if (!one_launch) {
    DSA_RETURN_IF_ERROR(rmsnorm_cuda(first));
    return rmsnorm_cuda(second);
  }
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const auto norm = [err](const RmsNormParams& p) {
    return GatheredNorm{p.x,
                        Gather{p.x_rows, p.x_row_bound, p.skip_minus_one, p.x_copy, err},
                        p.weight,
                        p.y,
                        p.x_stride == 0 ? p.dim : p.x_stride,
                        p.y_stride == 0 ? p.dim : p.y_stride,
                        p.eps};
  };
  DSA_CUDA_RETURN_IF_ERROR(kRmsNormGatherPairVec[s.slot](first.num_tokens, s, norm(first),
                                                         norm(second), first.dim / kVecElems));
  return cuda::end_launch("rmsnorm_pair", checked,
                          "rmsnorm_pair: x_rows[row] outside [0, x_row_bound)");
}

Status add_rmsnorm_cuda(const AddRmsNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t ys = p.y_stride == 0 ? p.dim : p.y_stride;
  const NormShape s = norm_shape(p.dim, p.dim, ys, p.h, p.y, p.weight);
  if (s.vec) {
    DSA_CUDA_RETURN_IF_ERROR(kAddRmsNormVec[s.slot](p, s, ys));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(launch_shape(p.num_tokens, s), add_rmsnorm_scalar_kernel,
                                          p.h, p.add, p.weight, p.y, p.dim, ys, p.eps));
  }
  return cuda::launch_error("add_rmsnorm");
}

Status residual_add_cuda(const ResidualAddParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t n = int64_t{p.num_tokens} * p.dim;
  const bool vec = n % kVecElems == 0 && cuda::is_aligned(p.h, 16) && cuda::is_aligned(p.x, 16);
  const int64_t work = vec ? n / kVecElems : n;
  constexpr int kThreads = 256;
  // Grid-stride loop: at most 132 SMs x 16 blocks of 256 threads in flight.
  const int64_t blocks = std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16);
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), size_t(0),
                                     cuda::current_stream()},
                   residual_add_kernel, p.h, p.x, n, vec));
  return cuda::launch_error("residual_add");
}

}  // namespace dsa::kernels
