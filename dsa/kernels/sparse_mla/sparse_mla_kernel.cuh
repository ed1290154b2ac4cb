// The sparse MLA attention kernel (SPEC.md §3f, §3g) and the split-KV combine kernel.
//
// One CTA = one query row r, a block of 64 heads [h0, h0 + 64) (heads >= H are zero padding) and
// one split's range of 64-key tiles of the row's index list. 8 warps: warp w owns head block
// hb = w % 4 (16 heads, the m16 of mma.sync) and half = w / 4, which selects the 32 keys of each
// tile whose scores it computes and the 256 value dims of the output it accumulates.
//
// Per tile of 64 keys:
//   gather   cp.async the 64 selected rows (bf16: straight into the swizzled K tile; FP8-656:
//            raw bytes into a staging buffer, then dequantised exactly into the K tile as bf16);
//            invalid keys are zero-filled and never read from memory.
//   scores   S[16 h, 32 keys] = Q[16 h, 576] . K[32 keys, 576]^T  (bf16 mma, fp32 accumulate)
//   softmax  online, fp32, in the log2 domain (scores pre-multiplied by sm_scale * log2 e); the
//            two warps of a head block exchange row maxima and row sums through shared memory, so
//            both hold the same (m, l); l sums the fp32 probabilities, P . V uses them rounded
//            to bf16 (the error §3f's bound admits).
//   P . V    O[16 h, 256 dims] += P[16 h, 64 keys] . K[64 keys, 256 dims]  (O in registers).
// A non-split CTA writes out = O / l (bf16) and lse = (m + log2 l) ln 2; a split CTA writes its
// unnormalised (O, m, l) to the workspace and sparse_mla_combine_kernel merges the splits in order.
//
// Shared memory (230,912 B): Q [64, 576] bf16 | K tile 0 [64, 576] | K tile 1 or the FP8 staging
// [64, 656] B | P [64, 64] bf16 | row maxima, row sums [2, 64] fp32 | key valid flags [2, 64].
// Q, K and P rows are XOR-swizzled in 16-byte chunks (chunk ^ (row & 7)) so that ldmatrix reads
// of 8 rows at one column are bank-conflict free.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels::sparse_mla_cuda {

inline constexpr int kHeadsPerCta = 64;
inline constexpr int kTileKeys = 64;
inline constexpr int kThreads = 256;
inline constexpr int kQkChunks = kQkDim / 8;                // 72 16-byte chunks per bf16 row
inline constexpr int kFp8RowChunks = kFp8LatentBytes / 16;  // 41

inline constexpr int kTileBytes = kTileKeys * kQkDim * 2;  // 73,728
inline constexpr int kQOff = 0;
inline constexpr int kK0Off = kQOff + kTileBytes;
inline constexpr int kK1Off = kK0Off + kTileBytes;  // second K tile, or the FP8 staging buffer
inline constexpr int kPOff = kK1Off + kTileBytes;
inline constexpr int kMaxOff = kPOff + kHeadsPerCta * kTileKeys * 2;
inline constexpr int kSumOff = kMaxOff + 2 * kHeadsPerCta * 4;
inline constexpr int kValidOff = kSumOff + 2 * kHeadsPerCta * 4;
inline constexpr int kSmemBytes = kValidOff + 2 * kTileKeys * 4;
static_assert(kTileKeys * kFp8LatentBytes <= kTileBytes, "FP8 staging must fit a K tile");
static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 shared memory per block");

inline constexpr float kLn2 = 0.693147180559945309f;

struct MlaKernelArgs {
  const bf16* q;            // [R, H, 576]
  const uint8_t* kv;        // key rows: bf16 [*, 576] or FP8-656 [*, 656 B]
  const int32_t* indices;   // [R, K]
  const int32_t* topk_len;  // [R] or nullptr
  int32_t rows, heads, topk;
  int32_t lo, hi;    // valid key indices are [lo, hi)
  float scale_log2;  // sm_scale * log2(e)
  bf16* out;         // [R, H, 512]
  float* lse;        // [R, H]
  float* max_logit;  // [R, H] or nullptr
  int32_t num_splits;
  float* part_o;               // [S, R * H, 512] (split only)
  float* part_ml;              // [S, R * H, 2]: m (log2 domain), l
  cuda::DeviceErrorWord* err;  // checked mode only, else nullptr
};

// ---------------------------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes = 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D[16x8] += A[16x16] (row) . B[16x8] (col), bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // RNE, lo in the low half
  return *reinterpret_cast<uint32_t*>(&v);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [*, 576] bf16 tile.
__device__ __forceinline__ uint32_t tile_off(int row, int chunk) {
  return static_cast<uint32_t>(row * (kQkDim * 2) + ((chunk ^ (row & 7)) << 4));
}
// Same for the [64, 64] bf16 P tile (8 chunks per row).
__device__ __forceinline__ uint32_t p_off(int row, int chunk) {
  return static_cast<uint32_t>(row * (kTileKeys * 2) + ((chunk ^ (row & 7)) << 4));
}

// ---------------------------------------------------------------------------------------------
// Gather of one tile of keys
// ---------------------------------------------------------------------------------------------

// Issues the copies of tile `t` (list entries [64 t, 64 t + 64) of row r) into dst (the K tile
// for bf16, the staging buffer for FP8) and records which keys are attended in valid[64]. Eight
// threads share a key row (16-byte chunks, coalesced); thread 8k of each group checks the index.
template <LatentFormat kFormat>
__device__ __forceinline__ void issue_tile(const MlaKernelArgs& a, int32_t r, int32_t len, int t,
                                           uint8_t* dst, int32_t* valid) {
  const int tid = threadIdx.x;
  const int32_t* idx_row = a.indices + int64_t{r} * a.topk;
#pragma unroll
  for (int pass = 0; pass < kTileKeys * 8 / kThreads; ++pass) {
    const int row = pass * (kThreads / 8) + (tid >> 3);
    const int32_t pos = t * kTileKeys + row;
    const int32_t idx = pos < len ? __ldg(idx_row + pos) : -1;
    const bool ok = idx >= a.lo && idx < a.hi;  // pos < len is implied: idx = -1 otherwise
    if ((tid & 7) == 0) {
      valid[row] = ok ? 1 : 0;
      if (!ok && idx != -1) {
        report_device_error(a.err, StatusCode::kOutOfRange, cuda::OpId::kSparseMla, r, idx);
      }
    }
    // Zero-filled copies still need a mapped address: q is one.
    const uint8_t* src = ok ? a.kv + int64_t{idx} * latent_bytes_per_token(kFormat)
                            : reinterpret_cast<const uint8_t*>(a.q);
    const int nbytes = ok ? 16 : 0;
    if constexpr (kFormat == LatentFormat::kBf16) {
      const uint32_t base = smem_u32(dst);
#pragma unroll
      for (int k = 0; k < kQkChunks / 8; ++k) {
        const int chunk = (tid & 7) + 8 * k;
        cp_async16(base + tile_off(row, chunk), src + (ok ? chunk * 16 : 0), nbytes);
      }
    } else {
      const uint32_t base = smem_u32(dst) + row * kFp8LatentBytes;
#pragma unroll
      for (int k = 0; k < (kFp8RowChunks + 7) / 8; ++k) {
        const int chunk = (tid & 7) + 8 * k;
        if (chunk < kFp8RowChunks)
          cp_async16(base + chunk * 16, src + (ok ? chunk * 16 : 0), nbytes);
      }
    }
  }
}

// FP8-656 staging [64, 656 B] -> swizzled bf16 K tile, exactly: float(e4m3) * 2^e is exact in
// fp32 and in bf16 (SPEC §2.4). Zero-filled (invalid) rows dequantise to zeros.
__device__ __forceinline__ void dequant_tile(const uint8_t* staging, uint8_t* ktile) {
  constexpr int kItemsPerRow = kLatentDim / 16 + kRopeDim / 8;  // 32 fp8 chunks + 8 k_pe chunks
  for (int it = threadIdx.x; it < kTileKeys * kItemsPerRow; it += kThreads) {
    const int row = it / kItemsPerRow, u = it % kItemsPerRow;
    const uint8_t* src = staging + row * kFp8LatentBytes;
    if (u < kLatentDim / 16) {
      const uint4 raw = *reinterpret_cast<const uint4*>(src + u * 16);
      const float scale = *reinterpret_cast<const float*>(src + kLatentDim + (u / 8) * 4);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      uint32_t packed[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const auto pair = static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * h));
          const __half2 v = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
          const float2 f = __half22float2(v);
          packed[2 * w + h] = pack_bf16x2(f.x * scale, f.y * scale);
        }
      }
      *reinterpret_cast<uint4*>(ktile + tile_off(row, 2 * u)) =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
      *reinterpret_cast<uint4*>(ktile + tile_off(row, 2 * u + 1)) =
          make_uint4(packed[4], packed[5], packed[6], packed[7]);
    } else {
      const int v = u - kLatentDim / 16;
      *reinterpret_cast<uint4*>(ktile + tile_off(row, kLatentDim / 8 + v)) =
          *reinterpret_cast<const uint4*>(src + kLatentDim + 16 + v * 16);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The attention kernel. grid = (R, ceil(H / 64), S), block = 256.
// ---------------------------------------------------------------------------------------------

template <LatentFormat kFormat>
__global__ void __launch_bounds__(kThreads, 1) sparse_mla_kernel(const MlaKernelArgs a) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* q_s = smem + kQOff;
  uint8_t* p_s = smem + kPOff;
  float* max_s = reinterpret_cast<float*>(smem + kMaxOff);          // [2 halves][64 heads]
  float* sum_s = reinterpret_cast<float*>(smem + kSumOff);          // [2 halves][64 heads]
  int32_t* valid_s = reinterpret_cast<int32_t*>(smem + kValidOff);  // [2 buffers][64 keys]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hb = warp & 3, half = warp >> 2;
  const int g = lane >> 2, c = lane & 3;
  const int32_t r = blockIdx.x;
  const int h0 = blockIdx.y * kHeadsPerCta;
  const int split = blockIdx.z;
  const bool active = h0 + hb * 16 < a.heads;  // warps of padding heads skip their MMAs

  // Row length: topk_len clamped into [0, K] (checked mode reports the raw value).
  int32_t len = a.topk;
  if (a.topk_len != nullptr) {
    const int32_t raw = __ldg(a.topk_len + r);
    if ((raw < 0 || raw > a.topk) && tid == 0) {
      report_device_error(a.err, StatusCode::kOutOfRange, cuda::OpId::kSparseMla, r, raw);
    }
    len = min(max(raw, 0), a.topk);
  }
  const int n_tiles = (len + kTileKeys - 1) / kTileKeys;
  const int t_begin = split * n_tiles / a.num_splits;
  const int t_end = (split + 1) * n_tiles / a.num_splits;

  // ---- Q: 64 heads x 576, padding heads zero-filled ----
  {
    const uint32_t q_base = smem_u32(q_s);
    for (int it = tid; it < kHeadsPerCta * kQkChunks; it += kThreads) {
      const int row = it / kQkChunks, chunk = it % kQkChunks;
      const bool ok = h0 + row < a.heads;
      const bf16* src = a.q + (int64_t{r} * a.heads + (ok ? h0 + row : 0)) * kQkDim + chunk * 8;
      cp_async16(q_base + tile_off(row, chunk), src, ok ? 16 : 0);
    }
  }
  uint8_t* const stage_s = smem + kK1Off;
  if (t_begin < t_end) {
    issue_tile<kFormat>(a, r, len, t_begin,
                        kFormat == LatentFormat::kBf16 ? smem + kK0Off : stage_s, valid_s);
  }
  cp_async_commit();

  float o[32][4];
#pragma unroll
  for (int j = 0; j < 32; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running max (log2 domain), rows g and g + 8
  float l[2] = {0.f, 0.f};              // running sum of the (fp32) probabilities

  const int row0 = hb * 16 + g;  // this thread's two heads inside the CTA: row0, row0 + 8
  for (int t = t_begin; t < t_end; ++t) {
    const int buf = (t - t_begin) & 1;
    cp_async_wait_all();
    __syncthreads();  // tile t landed for every thread; tile t - 1 fully consumed
    uint8_t* k_s;
    if constexpr (kFormat == LatentFormat::kBf16) {
      k_s = smem + (buf ? kK1Off : kK0Off);
      if (t + 1 < t_end) {
        issue_tile<kFormat>(a, r, len, t + 1, smem + (buf ? kK0Off : kK1Off),
                            valid_s + (buf ^ 1) * kTileKeys);
      }
    } else {
      k_s = smem + kK0Off;
      dequant_tile(stage_s, k_s);
      __syncthreads();  // K tile complete; the staging buffer is free
      if (t + 1 < t_end) {
        issue_tile<kFormat>(a, r, len, t + 1, stage_s, valid_s + (buf ^ 1) * kTileKeys);
      }
    }
    cp_async_commit();
    const int32_t* valid = valid_s + buf * kTileKeys;

    // ---- scores: S[16 heads, 32 keys] of this warp ----
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    const uint32_t k_base = smem_u32(k_s);
    if (active) {
      const uint32_t q_base = smem_u32(q_s);
      const int a_row = hb * 16 + (lane & 15), a_sel = lane >> 4;
      const int b_key = half * 32 + (lane & 7) + ((lane >> 4) << 3), b_sel = (lane >> 3) & 1;
#pragma unroll 4
      for (int ks = 0; ks < kQkDim / 16; ++ks) {
        uint32_t qa[4];
        ldmatrix_x4(q_base + tile_off(a_row, 2 * ks + a_sel), qa);
#pragma unroll
        for (int nn = 0; nn < 2; ++nn) {
          uint32_t kb[4];
          ldmatrix_x4(k_base + tile_off(b_key + 16 * nn, 2 * ks + b_sel), kb);
          mma_bf16(s[2 * nn], qa, kb[0], kb[1]);
          mma_bf16(s[2 * nn + 1], qa, kb[2], kb[3]);
        }
      }
    }

    // ---- online softmax (log2 domain) ----
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = half * 32 + j * 8 + 2 * c + (e & 1);
        s[j][e] = valid[key] ? s[j][e] * a.scale_log2 : -INFINITY;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], s[j][e]);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
      tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
    }
    if (c == 0) {
      max_s[half * kHeadsPerCta + row0] = tmax[0];
      max_s[half * kHeadsPerCta + row0 + 8] = tmax[1];
    }
    __syncthreads();
    float m_use[2], alpha[2], psum[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      const float m_new = fmaxf(m[i], fmaxf(max_s[row], max_s[kHeadsPerCta + row]));
      m_use[i] = m_new == -INFINITY ? 0.f : m_new;  // an all-masked row so far: p = 0, alpha = 0
      alpha[i] = exp2f(m[i] - m_use[i]);
      m[i] = m_new;
      psum[i] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float p0 = exp2f(s[j][2 * i] - m_use[i]), p1 = exp2f(s[j][2 * i + 1] - m_use[i]);
        psum[i] += p0 + p1;
        const uint32_t pp = pack_bf16x2(p0, p1);
        *reinterpret_cast<uint32_t*>(p_s + p_off(row0 + 8 * i, half * 4 + j) + 4 * c) = pp;
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      psum[i] += __shfl_xor_sync(0xffffffffu, psum[i], 1);
      psum[i] += __shfl_xor_sync(0xffffffffu, psum[i], 2);
    }
    if (c == 0) {
      sum_s[half * kHeadsPerCta + row0] = psum[0];
      sum_s[half * kHeadsPerCta + row0 + 8] = psum[1];
    }
    __syncthreads();  // P and the row sums of both halves are visible
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      l[i] = l[i] * alpha[i] + (sum_s[row] + sum_s[kHeadsPerCta + row]);
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[j][0] *= alpha[0], o[j][1] *= alpha[0];
      o[j][2] *= alpha[1], o[j][3] *= alpha[1];
    }

    // ---- O[16 heads, 256 dims] += P[16, 64] . V[64, 256] ----
    if (active) {
      const uint32_t p_base = smem_u32(p_s);
      const int a_row = hb * 16 + (lane & 15), a_sel = lane >> 4;
      const int v_key = (lane & 7) + (((lane >> 3) & 1) << 3), v_sel = lane >> 4;
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        uint32_t pa[4];
        ldmatrix_x4(p_base + p_off(a_row, 2 * kk + a_sel), pa);
#pragma unroll
        for (int jj = 0; jj < 16; ++jj) {
          uint32_t vb[4];
          ldmatrix_x4_trans(k_base + tile_off(kk * 16 + v_key, half * 32 + 2 * jj + v_sel), vb);
          mma_bf16(o[2 * jj], pa, vb[0], vb[1]);
          mma_bf16(o[2 * jj + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }
  cp_async_wait_all();  // nothing may stay in flight at exit (an empty range issued Q only)

  // ---- epilogue ----
  if (!active) return;
  const int64_t rh0 = int64_t{r} * a.heads + h0 + row0;  // (r, head) of row0; row0 + 8 is +8
  if (a.num_splits == 1) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t rh = rh0 + 8 * i;
      const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
      bf16* out = a.out + rh * kVDim + half * 256 + 2 * c;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const uint32_t v = l[i] > 0.f ? pack_bf16x2(o[j][2 * i] * inv, o[j][2 * i + 1] * inv) : 0u;
        *reinterpret_cast<uint32_t*>(out + j * 8) = v;
      }
      if (half == 0 && c == 0) {
        a.lse[rh] = l[i] > 0.f ? m[i] * kLn2 + logf(l[i]) : INFINITY;
        if (a.max_logit != nullptr) a.max_logit[rh] = l[i] > 0.f ? m[i] * kLn2 : -INFINITY;
      }
    }
  } else {
    const int64_t rh_total = int64_t{a.rows} * a.heads;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t slot = split * rh_total + rh0 + 8 * i;
      float* po = a.part_o + slot * kVDim + half * 256 + 2 * c;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(po + j * 8) = make_float2(o[j][2 * i], o[j][2 * i + 1]);
      }
      if (half == 0 && c == 0) {
        a.part_ml[slot * 2] = l[i] > 0.f ? m[i] : -INFINITY;
        a.part_ml[slot * 2 + 1] = l[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Split combine. grid = R * H, block = 128: one (row, head), 4 value dims per thread, splits
// merged in order 0..S-1 (deterministic).
// ---------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(128) sparse_mla_combine_kernel(const MlaKernelArgs a) {
  const int64_t rh = blockIdx.x;
  const int64_t rh_total = int64_t{a.rows} * a.heads;
  const int d = threadIdx.x * 4;
  float mx = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s) mx = fmaxf(mx, a.part_ml[(s * rh_total + rh) * 2]);
  bf16* out = a.out + rh * kVDim + d;
  if (mx == -INFINITY) {  // empty attended set
    *reinterpret_cast<uint2*>(out) = make_uint2(0u, 0u);
    if (threadIdx.x == 0) {
      a.lse[rh] = INFINITY;
      if (a.max_logit != nullptr) a.max_logit[rh] = -INFINITY;
    }
    return;
  }
  float sum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < a.num_splits; ++s) {
    const int64_t slot = s * rh_total + rh;
    const float w = exp2f(a.part_ml[slot * 2] - mx);  // 0 for an empty split (m = -inf)
    sum += a.part_ml[slot * 2 + 1] * w;
    const float4 v = *reinterpret_cast<const float4*>(a.part_o + slot * kVDim + d);
    acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
  }
  const float inv = 1.f / sum;
  *reinterpret_cast<uint2*>(out) =
      make_uint2(pack_bf16x2(acc.x * inv, acc.y * inv), pack_bf16x2(acc.z * inv, acc.w * inv));
  if (threadIdx.x == 0) {
    a.lse[rh] = mx * kLn2 + logf(sum);
    if (a.max_logit != nullptr) a.max_logit[rh] = mx * kLn2;
  }
}

}  // namespace dsa::kernels::sparse_mla_cuda
