// CUDA gathers (SPEC.md §3h): indexer keys (codes + scale, byte for byte) and MLA latents (bf16
// rows verbatim, FP8-656 rows dequantised exactly) from the paged pools into contiguous rows, in
// request order. Class E.
//
// Work split: the grid cannot depend on the lengths (they live on the device, and the launch must
// be capturable in a CUDA graph), and EXTEND batches mix one long prompt with short ones, so the
// kernels are grid-stride loops over the S = cu_kv[B_pad] output rows rather than one CTA per
// (request, chunk): output row r finds its request by a binary search of cu_kv (the largest b with
// cu_kv[b] <= r), then its slot through the page table. Consecutive rows of a request read
// consecutive token rows of one page, so the copies stay coalesced.
#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/gather/gather.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kCtasPerSm = 2048 / kThreads;  // full occupancy at <= 32 registers per thread
constexpr int kIndexerLanesPerRow = kIndexHeadDim / 16;              // 8 lanes x 16 B = 128 codes
constexpr int kIndexerRowsPerStep = kThreads / kIndexerLanesPerRow;  // 32
constexpr int kLatentRowsPerStep = kThreads / 32;                    // one warp per row: 8
constexpr int kLatentRowVectors = kBf16LatentBytes / 16;             // 72 uint4 per bf16 row

// Where rows come from, shared by both gathers.
struct Source {
  const int32_t* req_slot;  // [B_pad]
  const int32_t* cu_kv;     // [B_pad + 1]
  PageTable table;          // [R_slots, W]
  int32_t num_pages;
  int32_t batch_pad;
  int32_t capacity;
};

__device__ __forceinline__ int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// S = cu_kv[B_pad] checked against the capacity (always: ResourceExhausted, nothing written), then
// in checked mode CTA 0 checks cu_kv[0] = 0 and cu_kv non-decreasing. Returns S clamped at 0, or
// -1 when the launch must do nothing.
template <bool kChecked>
__device__ int32_t gathered_rows(const Source& s, cuda::DeviceErrorWord* error) {
  const int32_t total = __ldg(s.cu_kv + s.batch_pad);
  if (total > s.capacity) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      cuda::report_device_error(error, StatusCode::kResourceExhausted, cuda::OpId::kGather,
                                s.batch_pad, total);
    }
    return -1;
  }
  if (kChecked && blockIdx.x == 0) {
    const int32_t first = __ldg(s.cu_kv);
    if (threadIdx.x == 0 && first != 0) {
      cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kGather, 0, first);
    }
    for (int32_t b = threadIdx.x; b < s.batch_pad; b += blockDim.x) {
      const int32_t next = __ldg(s.cu_kv + b + 1);
      if (next < __ldg(s.cu_kv + b)) {
        cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kGather, b + 1, next);
      }
    }
  }
  return total > 0 ? total : 0;
}

// The pool slot feeding output row r < S, or -1 when the row is not written: no request covers it
// (r below cu_kv[0]) or, in checked mode, an out-of-contract value was found (reported by the
// lanes with `reporter` set). With c(b) = clamp(cu_kv[b], 0, S), request b owns rows
// [c(b), c(b + 1)) when cu_kv is non-decreasing, as in the reference; the search stays in bounds
// for any cu_kv. Unchecked neutralisation as in the reference: a bad req_slot reads row 0, a
// position at or past W P or a page id outside [0, num_pages) reads page 0.
template <bool kChecked>
__device__ __forceinline__ int32_t source_slot(const Source& s, int32_t total, int32_t r,
                                               bool reporter, cuda::DeviceErrorWord* error) {
  int32_t lo = 0, hi = s.batch_pad;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (clamp_i32(__ldg(s.cu_kv + mid), 0, total) <= r) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int32_t b = lo - 1;
  if (b < 0) return -1;
  const int32_t pos = r - clamp_i32(__ldg(s.cu_kv + b), 0, total);
  int32_t row = __ldg(s.req_slot + b);
  if (row < 0 || row >= s.table.num_rows) {
    if (kChecked) {
      if (reporter) {
        cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kGather, b, row);
      }
      return -1;
    }
    row = 0;
  }
  int32_t page = 0;
  if (int64_t{pos} < int64_t{s.table.width} * kPageSize) {
    page = __ldg(s.table.data + int64_t{row} * s.table.width + pos / kPageSize);
  } else if (kChecked) {
    if (reporter) {
      cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kGather, b, pos);
    }
    return -1;
  }
  if (kChecked && (page < 1 || page >= s.num_pages)) {
    if (reporter) {
      cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kGather, b, page);
    }
    return -1;
  }
  if (page < 0 || page >= s.num_pages) page = 0;
  return page * kPageSize + pos % kPageSize;
}

// Grid-stride over groups of 32 output rows; 8 lanes own a row: lane j copies codes
// [16j, 16j + 16) of the row's slot into k8[r] ([S, 128] e4m3), lane 0 also the fp32 scale into
// kscale[r]. Rows of one page are 128 B apart in the pool, so a warp reads 512 contiguous bytes.
template <bool kChecked>
__global__ void __launch_bounds__(kThreads)
    indexer_gather_kernel(Source src, IndexerPool pool, uint8_t* __restrict__ k8,
                          float* __restrict__ kscale, cuda::DeviceErrorWord* error) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t total = gathered_rows<kChecked>(src, error);
  const int j = threadIdx.x % kIndexerLanesPerRow;
  for (int64_t r = int64_t{blockIdx.x} * kIndexerRowsPerStep + threadIdx.x / kIndexerLanesPerRow;
       r < total; r += int64_t{gridDim.x} * kIndexerRowsPerStep) {
    const int32_t slot = source_slot<kChecked>(src, total, int32_t(r), j == 0, error);
    if (slot < 0) continue;
    const uint4 v =
        __ldg(reinterpret_cast<const uint4*>(pool.data + indexer_value_offset(pool, slot)) + j);
    reinterpret_cast<uint4*>(k8 + r * kIndexHeadDim)[j] = v;
    if (j == 0) {
      kscale[r] =
          __ldg(reinterpret_cast<const float*>(pool.data + indexer_scale_offset(pool, slot)));
    }
  }
}

// 16 e4m3 codes of one tile times its power-of-two scale, to bf16 (exact): the reference's
// float_to_bf16(e4m3_to_float(q) * scale), value by value.
__device__ __forceinline__ void dequant16(uint4 codes, float scale, uint4* out) {
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t packed[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t pair = w[i / 2] >> (16 * (i % 2));
    const bf16 lo = float_to_bf16(e4m3_to_float(e4m3{uint8_t(pair & 0xFFu)}) * scale);
    const bf16 hi = float_to_bf16(e4m3_to_float(e4m3{uint8_t((pair >> 8) & 0xFFu)}) * scale);
    packed[i] = uint32_t{lo.bits} | (uint32_t{hi.bits} << 16);
  }
  out[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  out[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// Grid-stride over groups of 8 output rows, one warp per row of kv ([S, 576] bf16).
//  bf16 pool: the 72 16-byte vectors of the 1152-byte row, lane l taking l, l + 32, l + 64.
//  FP8-656 pool: lane l reads codes [16l, 16l + 16) (tile l / 8) and writes 16 bf16 (32 B);
//  lanes 0..7 copy the 128 bytes of k_pe.
template <LatentFormat kFormat, bool kChecked>
__global__ void __launch_bounds__(kThreads)
    latent_gather_kernel(Source src, LatentPool pool, bf16* __restrict__ kv,
                         cuda::DeviceErrorWord* error) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t total = gathered_rows<kChecked>(src, error);
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t{blockIdx.x} * kLatentRowsPerStep + threadIdx.x / 32; r < total;
       r += int64_t{gridDim.x} * kLatentRowsPerStep) {
    const int32_t slot = source_slot<kChecked>(src, total, int32_t(r), lane == 0, error);
    if (slot < 0) continue;
    const uint8_t* row = pool.data + latent_row_offset(pool, slot);
    uint4* dst = reinterpret_cast<uint4*>(kv + r * kQkDim);
    if constexpr (kFormat == LatentFormat::kBf16) {
      const uint4* s = reinterpret_cast<const uint4*>(row);
      uint4 v[3] = {};
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        if (lane + 32 * i < kLatentRowVectors) v[i] = __ldg(s + lane + 32 * i);
      }
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        if (lane + 32 * i < kLatentRowVectors) dst[lane + 32 * i] = v[i];
      }
    } else {
      const uint4 codes = __ldg(reinterpret_cast<const uint4*>(row) + lane);
      const float scale = __ldg(reinterpret_cast<const float*>(row + kLatentDim) + lane / 8);
      uint4 pe = make_uint4(0, 0, 0, 0);
      if (lane < kRopeDim / 8)
        pe = __ldg(reinterpret_cast<const uint4*>(row + kLatentDim + 16) + lane);
      uint4 out[2];
      dequant16(codes, scale, out);
      dst[2 * lane] = out[0];
      dst[2 * lane + 1] = out[1];
      if (lane < kRopeDim / 8) dst[kLatentDim / 8 + lane] = pe;
    }
  }
}

// Enough CTAs to fill the machine (grid-stride beyond), never more than the capacity needs, and
// at least one so the capacity check runs.
StatusOr<unsigned> grid_size(int32_t capacity, int rows_per_step) {
  DSA_ASSIGN_OR_RETURN(const int sms, cuda::sm_count());
  const int64_t needed = (int64_t{capacity} + rows_per_step - 1) / rows_per_step;
  const int64_t full = int64_t{sms} * kCtasPerSm;
  return unsigned(needed < 1 ? 1 : (needed < full ? needed : full));
}

// What both gathers launch with: the error word (passed unchecked too: the capacity check always
// reports), a grid for the capacity, the request source and the mode.
struct Launch {
  cuda::DeviceErrorWord* error;
  unsigned grid;
  Source src;
  bool checked;
};

template <typename Params>
StatusOr<Launch> prepare(const Params& p, int rows_per_step) {
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * error, cuda::device_error_word());
  DSA_ASSIGN_OR_RETURN(const unsigned grid, grid_size(p.capacity, rows_per_step));
  const Source src{p.req_slot, p.cu_kv, p.page_table, p.pool.num_pages, p.batch_pad, p.capacity};
  return Launch{error, grid, src, checked_mode()};
}

}  // namespace

Status indexer_gather_cuda(const IndexerGatherParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(
      cuda::require_aligned("indexer_gather_cuda", "pool.data and k8", {p.pool.data, p.k8}, 16));
  DSA_ASSIGN_OR_RETURN(const Launch l, prepare(p, kIndexerRowsPerStep));
  cudaStream_t stream = cuda::current_stream();
  if (l.checked) {
    DSA_CUDA_RETURN_IF_ERROR(
        cuda::launch(cuda::LaunchShape{dim3(l.grid), dim3(kThreads), size_t(0), stream},
                     indexer_gather_kernel<true>, l.src, p.pool, p.k8, p.kscale, l.error));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(
        cuda::launch(cuda::LaunchShape{dim3(l.grid), dim3(kThreads), size_t(0), stream},
                     indexer_gather_kernel<false>, l.src, p.pool, p.k8, p.kscale, l.error));
  }
  return cuda::end_launch("indexer_gather_kernel", l.checked, "indexer_gather_cuda");
}

Status latent_gather_cuda(const LatentGatherParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(
      cuda::require_aligned("latent_gather_cuda", "pool.data and kv", {p.pool.data, p.kv}, 16));
  DSA_ASSIGN_OR_RETURN(const Launch l, prepare(p, kLatentRowsPerStep));
  cudaStream_t stream = cuda::current_stream();
  const bool bf16_pool = p.pool.format == LatentFormat::kBf16;
  if (l.checked && bf16_pool) {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(l.grid), dim3(kThreads), size_t(0), stream},
        latent_gather_kernel<LatentFormat::kBf16, true>, l.src, p.pool, p.kv, l.error));
  } else if (l.checked) {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(l.grid), dim3(kThreads), size_t(0), stream},
        latent_gather_kernel<LatentFormat::kFp8_656, true>, l.src, p.pool, p.kv, l.error));
  } else if (bf16_pool) {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(l.grid), dim3(kThreads), size_t(0), stream},
        latent_gather_kernel<LatentFormat::kBf16, false>, l.src, p.pool, p.kv, l.error));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(l.grid), dim3(kThreads), size_t(0), stream},
        latent_gather_kernel<LatentFormat::kFp8_656, false>, l.src, p.pool, p.kv, l.error));
  }
  return cuda::end_launch("latent_gather_kernel", l.checked, "latent_gather_cuda");
}

}  // namespace dsa::kernels
