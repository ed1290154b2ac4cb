// The sparse MLA attention kernel on Hopper's warpgroup MMAs (SPEC.md §3f decode, §3g prefill).
//
// One CTA = one query row r, a block of 64 heads [h0, h0 + 64) (heads >= H are zero rows of Q) and
// one split's range of 64-key tiles of the row's index list. 384 threads in three warpgroups:
//   producers (warpgroup 0): gather the tile's 64 selected latent rows into one of two
//     bf16 key tiles: bf16 cache rows by cp.async straight into the tile; FP8-656 rows by cp.async
//     into a staging area inside the tile (the whole tile in flight at once), then dequantised in
//     place, exactly (e4m3 * 2^e is a bf16), their bf16 RoPE part by cp.async. Invalid keys are
//     zero rows (never read from memory) and flagged, so the consumers mask them to -inf. The
//     tile's completion is an mbarrier phase ("full"); the consumers hand the tile back through
//     another ("empty").
//   consumers (warpgroups 1, 2): consumer c computes, per tile,
//     S_c[64 h, 32 keys] = Q[64, 576] . K[keys 32c .. 32c + 31, 576]^T   (wgmma m64n32k16, 36
//     steps) the online softmax in the log2 domain (row maxima exchanged between the two consumers
//     through shared memory, one named barrier), its half of P[64 h, 64 keys] (bf16) to shared
//     memory, a second named barrier, then
//     O_c[64 h, 256 dims] += P[64, 64] . K[64 keys, dims 256c .. 256c + 255]   (m64n256k16, 4
//     steps, the value columns read MN-major from the same key tile)
//   with O_c in registers. Each consumer keeps its own partial row sums (both use the same running
//   maxima, so the sums add at the end). At the top of tile t the consumer waits for the P . V of
//   tile t - 1 (which overlaps only its wait for tile t's data), hands that key tile back to the
//   producers at once, then issues S of tile t.
// A non-split CTA writes out = O / l (bf16) and lse = (m + log2 l) ln 2; a split CTA writes its
// unnormalised (O, m, l) to the workspace and sparse_mla_combine_kernel merges the splits in order.
//
// Shared memory: Q [64, 576] bf16 | key tiles 0, 1 [64, 576] bf16 | P [64, 64] bf16 | row maxima
// [2 tiles][2 consumers][64] fp32 | row sums [2][64] | key valid bytes [2 tiles][64] | mbarriers.
// Q and key tiles are nine column blocks of [64 rows, 64 values] (8 KB each), each in the 128-byte
// swizzle wgmma reads (16-byte chunk j of row i at chunk j ^ (i & 7)); P is one such block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/common/wgmma_bf16_ops.cuh"
#include "dsa/kernels/sparse_mla/sparse_mla_kernel.cuh"

namespace dsa::kernels::sparse_mla_cuda {

namespace wg {

inline constexpr int kThreads = 384;
inline constexpr int kProducerThreads = 128;
inline constexpr int kConsumerThreads = 256;
// Register split (setmaxnreg, which ptxas allocates each role by): the consumers hold O (128
// fp32) and S (16) with all of O live across the m64n256 MMAs; the producers need far fewer (the
// FP8 one holds 8 raw chunks, 32, plus two tiles' list entries; the rows themselves are staged in
// shared memory). 128 x 120 + 256 x 192 = 384 x 168, the launch's allocation.
inline constexpr int kProducerRegs = 120;
inline constexpr int kConsumerRegs = 192;
static_assert(kProducerThreads * kProducerRegs + kConsumerThreads * kConsumerRegs <=
              kThreads * 168);

inline constexpr int kBlockBytes = kTileKeys * 128;           // one [64, 64] bf16 column block
inline constexpr int kTileBytes = kQkDim / 64 * kBlockBytes;  // 9 blocks: 73,728
inline constexpr int kQOff = 0;
inline constexpr int kKOff = kQOff + kTileBytes;  // two key tiles
inline constexpr int kPOff = kKOff + 2 * kTileBytes;
inline constexpr int kMaxOff = kPOff + kBlockBytes;
inline constexpr int kSumOff = kMaxOff + 2 * 2 * kHeadsPerCta * 4;
inline constexpr int kValidOff = kSumOff + 2 * kHeadsPerCta * 4;
inline constexpr int kBarOff = kValidOff + 2 * kTileKeys;
// + 1008: the dynamic base (16-byte aligned) is aligned up to the 1024 bytes of the swizzle atom.
inline constexpr int kSmemBytes = kBarOff + 4 * 8 + 1008;
static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 shared memory per block");
static_assert(kProducerThreads == 2 * kTileKeys, "copy passes: 16 keys x 8 threads, 4 passes");

// Byte offset of 16-byte chunk `chunk` (of 72 per 576-wide row) of row `row` in a tile.
__device__ __forceinline__ uint32_t tile_off(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 +
                               (((chunk & 7) ^ (row & 7)) << 4));
}

// Descriptor of an MN-major operand in the 128-byte swizzle (the value columns of a key tile as
// P . V's B): 64 values of a row contiguous (128 bytes), rows (keys, the K dimension) 128 bytes
// apart in 8-row groups 1024 bytes apart (stride byte offset), the next 64 values (N) one column
// block further (leading byte offset).
__device__ __forceinline__ uint64_t mnmajor_sw128_desc(uint32_t addr) {
  uint64_t desc = (addr & 0x3FFFFu) >> 4;
  desc |= uint64_t{kBlockBytes >> 4} << 16;
  desc |= uint64_t{1024 >> 4} << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

__device__ __forceinline__ void consumer_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kConsumerThreads) : "memory");
}
__device__ __forceinline__ void producer_sync() {
  asm volatile("bar.sync 3, %0;\n" ::"n"(kProducerThreads) : "memory");
}

// Sixteen e4m3 values times `scale` into sixteen bf16, as two 16-byte chunks (e4m3 -> f16 -> f32,
// times scale, RNE to bf16): exact for a power-of-two scale, NaN kept. (An integer-unit version
// — rebasing the bits into bf16 and one bf16 multiply — was measured slower on the H200: 83 vs
// 78 us at b 32, 270 vs 246 us at b 128; bench/RESULTS.md.)
__device__ __forceinline__ void dequant16(uint4 raw, float scale, uint4& lo, uint4& hi) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t packed[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * h));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      packed[2 * w + h] = pack_bf16x2(f.x * scale, f.y * scale);
    }
  }
  lo = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  hi = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// The list entries one producer thread reads for a tile, loaded a tile ahead (their latency then
// hides behind the current tile's copies): the key of each copy pass (16 keys per pass, 8
// threads per key: key pass * 16 + ptid / 8) and, for FP8, the key it dequantises (ptid & 63).
struct TileIndices {
  int32_t pass[kTileKeys / 16];
  int32_t own = -1;
};

// Read-only global loads issued where they are written: volatile, so the compiler cannot sink
// them to their first use (past the copies and barriers whose latency they should hide).
__device__ __forceinline__ int32_t ldg_early(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float ldg_early(const float* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ int32_t list_entry(const MlaKernelArgs& a, int32_t r, int32_t len,
                                              int32_t pos) {
  return pos < len ? ldg_early(a.indices + int64_t{r} * a.topk + pos) : -1;
}

template <LatentFormat kFormat>
__device__ __forceinline__ TileIndices load_tile_indices(const MlaKernelArgs& a, int32_t r,
                                                         int32_t len, int t, int ptid) {
  TileIndices ix{};
#pragma unroll
  for (int p = 0; p < kTileKeys / 16; ++p) {
    ix.pass[p] = list_entry(a, r, len, t * kTileKeys + p * 16 + (ptid >> 3));
  }
  // Only the FP8 producer dequantises a row of its own (the loads are volatile: not dropped).
  if constexpr (kFormat == LatentFormat::kFp8_656) {
    ix.own = list_entry(a, r, len, t * kTileKeys + (ptid & (kTileKeys - 1)));
  }
  return ix;
}

// An entry if it is attended, else -1; an entry that is neither -1 nor a valid row is reported
// (checked mode) by the thread that passes `report`.
__device__ __forceinline__ int32_t attended(const MlaKernelArgs& a, int32_t r, int32_t idx,
                                            bool report) {
  const bool ok = idx >= a.lo && idx < a.hi;
  if (!ok && idx != -1 && report) {
    report_device_error(a.err, StatusCode::kOutOfRange, cuda::OpId::kSparseMla, r, idx);
  }
  return ok ? idx : -1;
}

// The key of copy pass p for this thread (16 keys per pass, 8 threads per key) and its attended
// index (-1 if not attended); the first thread of the key's eight writes its flag.
__device__ __forceinline__ int32_t pass_key(const MlaKernelArgs& a, int32_t r,
                                            const TileIndices& ix, int p, int ptid, uint8_t* valid,
                                            int& key) {
  key = p * 16 + (ptid >> 3);
  const int32_t idx = attended(a, r, ix.pass[p], /*report=*/(ptid & 7) == 0);
  if ((ptid & 7) == 0) valid[key] = idx >= 0;
  return idx;
}

// bf16 cache: the tile's 64 rows by cp.async straight into `tile` (8 threads per row, 128
// contiguous bytes per copy instruction), their flags into `valid`.
__device__ __forceinline__ void produce_bf16(const MlaKernelArgs& a, int32_t r,
                                             const TileIndices& ix, int ptid, uint8_t* tile,
                                             uint8_t* valid) {
  const uint32_t base = hopper::smem_u32(tile);
  const uint8_t* dummy = reinterpret_cast<const uint8_t*>(a.q);  // mapped, for zero-fills
#pragma unroll
  for (int p = 0; p < kTileKeys / 16; ++p) {
    int key;
    const int32_t idx = pass_key(a, r, ix, p, ptid, valid, key);
    const uint8_t* src = idx >= 0 ? a.kv + int64_t{idx} * kBf16LatentBytes : dummy;
#pragma unroll
    for (int k = 0; k < kQkChunks / 8; ++k) {
      const int chunk = (ptid & 7) + 8 * k;
      hopper::cp_async16(base + tile_off(key, chunk), idx >= 0 ? src + chunk * 16 : dummy,
                         idx >= 0 ? 16 : 0);
    }
  }
}

// FP8-656: the raw e4m3 rows land by cp.async (no registers: the whole tile in flight at once) in
// a staging area inside the tile itself, raw chunk c (16 values) of row k where bf16 chunk 32 + c
// of the row goes (column blocks 4..7); the bf16 RoPE parts go straight to column block 8. Then
// the rows are dequantised in place, exactly (e4m3 * 2^e is a bf16): values 0..255 into column
// blocks 0..3, which hold no staging, then 256..511, whose raw chunks every thread reads before
// any thread overwrites the staging. Thread (k = ptid & 63, g = ptid >> 6) converts chunks
// 8g .. 8g + 7 of each half of row k; eight consecutive threads take eight rows, so the swizzled
// reads and writes are conflict-free.
__device__ __forceinline__ void produce_fp8(const MlaKernelArgs& a, int32_t r,
                                            const TileIndices& ix, int ptid, uint8_t* tile,
                                            uint8_t* valid) {
  const uint32_t base = hopper::smem_u32(tile);
  const uint8_t* dummy = reinterpret_cast<const uint8_t*>(a.q);  // mapped, for zero-fills
#pragma unroll
  for (int p = 0; p < kTileKeys / 16; ++p) {
    const int lane8 = ptid & 7;
    int key;
    const int32_t idx = pass_key(a, r, ix, p, ptid, valid, key);
    const uint8_t* row = a.kv + int64_t{idx < 0 ? 0 : idx} * kFp8LatentBytes;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int c = lane8 + 8 * m;
      hopper::cp_async16(base + tile_off(key, 32 + c), idx >= 0 ? row + c * 16 : dummy,
                         idx >= 0 ? 16 : 0);
    }
    hopper::cp_async16(base + tile_off(key, kLatentDim / 8 + lane8),
                       idx >= 0 ? row + kLatentDim + 16 + lane8 * 16 : dummy, idx >= 0 ? 16 : 0);
  }
  const int k = ptid & (kTileKeys - 1), g = ptid >> 6;
  const int32_t idx_k = attended(a, r, ix.own, /*report=*/false);
  const float* scales = reinterpret_cast<const float*>(
      a.kv + int64_t{idx_k < 0 ? 0 : idx_k} * kFp8LatentBytes + kLatentDim);
  const float scale_a = idx_k >= 0 ? ldg_early(scales + g) : 0.f;
  const float scale_b = idx_k >= 0 ? ldg_early(scales + 2 + g) : 0.f;
  hopper::cp_async_commit();
  hopper::cp_async_wait_all();
  producer_sync();  // every row staged
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int u = 8 * g + j;
    uint4 lo, hi;
    dequant16(*reinterpret_cast<const uint4*>(tile + tile_off(k, 32 + u)), scale_a, lo, hi);
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u)) = lo;
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u + 1)) = hi;
  }
  uint4 raw[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    raw[j] = *reinterpret_cast<const uint4*>(tile + tile_off(k, 48 + 8 * g + j));
  }
  producer_sync();  // the staging is read
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int u = 16 + 8 * g + j;
    uint4 lo, hi;
    dequant16(raw[j], scale_b, lo, hi);
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u)) = lo;
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u + 1)) = hi;
  }
}

}  // namespace wg

// grid = (R * ceil(H / 64), 1, S), head blocks fastest: the head blocks of one row are neighbours,
// so the second reads the row's keys from L2. block = 384.
template <LatentFormat kFormat>
__global__ void __launch_bounds__(wg::kThreads, 1) sparse_mla_wgmma_kernel(const MlaKernelArgs a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  using namespace hopper;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // Aligned up by pointer arithmetic on the shared array itself (not through an integer cast), so
  // the compiler keeps every access below a shared-memory one (LDS / STS, not generic LD / ST).
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  uint8_t* q_s = smem + wg::kQOff;
  uint8_t* p_s = smem + wg::kPOff;
  float* max_s = reinterpret_cast<float*>(smem + wg::kMaxOff);       // [tile & 1][consumer][64]
  float* sum_s = reinterpret_cast<float*>(smem + wg::kSumOff);       // [consumer][64]
  uint8_t* valid_s = smem + wg::kValidOff;                           // [buffer][64]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + wg::kBarOff);  // [2]
  uint64_t* empty = full + 2;                                        // [2]

  const int tid = threadIdx.x, lane = tid & 31;
  const int head_blocks = (a.heads + kHeadsPerCta - 1) / kHeadsPerCta;
  const int h0 = (blockIdx.x % head_blocks) * kHeadsPerCta;
  const int32_t r = blockIdx.x / head_blocks;
  const int split = blockIdx.z;

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
  const int n = (split + 1) * n_tiles / a.num_splits - t_begin;  // tiles of this CTA

  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(&full[b], wg::kProducerThreads);
      mbar_init(&empty[b], wg::kConsumerThreads);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (tid < wg::kProducerThreads) {
    // ---------------------------------- producers ----------------------------------
    regs_release<wg::kProducerRegs>();
    if (n > 0) {
      // Q: 64 heads x 576, padding heads zero-filled; completes with tile 0.
      for (int it = tid; it < kHeadsPerCta * kQkChunks; it += wg::kProducerThreads) {
        const int row = it / kQkChunks, chunk = it % kQkChunks;
        const bool ok = h0 + row < a.heads;
        const bf16* src = a.q + (int64_t{r} * a.heads + (ok ? h0 + row : 0)) * kQkDim + chunk * 8;
        cp_async16(smem_u32(q_s) + wg::tile_off(row, chunk), src, ok ? 16 : 0);
      }
    }
    wg::TileIndices ix = wg::load_tile_indices<kFormat>(a, r, len, t_begin, tid);
    for (int i = 0; i < n; ++i) {
      const int b = i & 1;
      const wg::TileIndices cur = ix;
      if (i + 1 < n) ix = wg::load_tile_indices<kFormat>(a, r, len, t_begin + i + 1, tid);
      if (i >= 2) mbar_wait(&empty[b], ((i >> 1) - 1) & 1);
      uint8_t* tile = smem + wg::kKOff + b * wg::kTileBytes;
      if constexpr (kFormat == LatentFormat::kBf16) {
        wg::produce_bf16(a, r, cur, tid, tile, valid_s + b * kTileKeys);
      } else {
        wg::produce_fp8(a, r, cur, tid, tile, valid_s + b * kTileKeys);
      }
      cp_async_commit();
      cp_async_wait_all();
      fence_proxy_async_smem();  // this thread's tile writes, visible to the consumers' wgmma
      mbar_arrive(&full[b]);
    }
  } else {
    // ---------------------------------- consumers ----------------------------------
    regs_claim<wg::kConsumerRegs>();
    const int ctid = tid - wg::kProducerThreads;
    const int c = ctid >> 7;         // consumer: keys 32c.., value dims 256c..
    const int cw = (ctid >> 5) & 3;  // warp within the consumer warpgroup
    const int row0 = cw * 16 + (lane >> 2), cc = lane & 3;  // rows row0, row0 + 8; column pair cc

    float o[128];
#pragma unroll
    for (int j = 0; j < 128; ++j) o[j] = 0.f;
    float m[2] = {-INFINITY, -INFINITY};  // running max (log2 domain), rows row0 and row0 + 8
    float l[2] = {0.f, 0.f};              // this thread's share of the running sums

    const uint32_t q_base = smem_u32(q_s), p_base = smem_u32(p_s);
    for (int i = 0; i < n; ++i) {
      const int b = i & 1;
      if (i > 0) {
        // P . V of tile i - 1 retired: its key tile goes back to the producers before this
        // consumer waits for tile i, so they have all of tile i's time to fill it. (Waiting for
        // that group alone behind S would serialise the MMAs: ptxas C7514.)
        wgmma_wait<0>();
        // Every consumer thread arrives: an arrival releases only the arriving thread's own reads
        // (of the tile's valid flags here).
        mbar_arrive(&empty[b ^ 1]);
      }
      mbar_wait(&full[b], (i >> 1) & 1);
      const uint32_t k_base = smem_u32(smem + wg::kKOff + b * wg::kTileBytes);

      // ---- S_c = Q . K[32c .. 32c + 31]^T ----
      float s[16];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kQkDim / 16; ++ks) {
        const uint32_t k_off = (ks >> 2) * wg::kBlockBytes + (ks & 3) * 32;
        wgmma::wgmma_m64n32k16_bf16(s, kmajor_sw128_desc(q_base + k_off),
                                    kmajor_sw128_desc(k_base + k_off + c * 32 * 128), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();  // S of tile i
      fence_registers(s);
      fence_registers(o);

      // ---- online softmax (log2 domain) ----
      const uint8_t* valid = valid_s + b * kTileKeys;
      float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = c * 32 + j * 8 + 2 * cc + (e & 1);
          s[4 * j + e] = valid[key] ? s[4 * j + e] * a.scale_log2 : -INFINITY;
          tmax[e >> 1] = fmaxf(tmax[e >> 1], s[4 * j + e]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
      }
      float* max_i = max_s + (i & 1) * 2 * kHeadsPerCta;
      if (cc == 0) {
        max_i[c * kHeadsPerCta + row0] = tmax[0];
        max_i[c * kHeadsPerCta + row0 + 8] = tmax[1];
      }
      wg::consumer_sync(1);  // both maxima written; both consumers' P . V of tile i - 1 retired
      float m_use[2], alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        const float m_new = fmaxf(m[h], fmaxf(max_i[row], max_i[kHeadsPerCta + row]));
        m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: p = 0, alpha = 0
        alpha[h] = exp2f(m[h] - m_use[h]);
        m[h] = m_new;
        l[h] *= alpha[h];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float p0 = exp2f(s[4 * j + 2 * h] - m_use[h]);
          const float p1 = exp2f(s[4 * j + 2 * h + 1] - m_use[h]);
          l[h] += p0 + p1;
          const int row = row0 + 8 * h;
          *reinterpret_cast<uint32_t*>(p_s + row * 128 + (((c * 4 + j) ^ (row & 7)) << 4) +
                                       4 * cc) = pack_bf16x2(p0, p1);
        }
      }
      // O rescales only when a row maximum of this warp grew (after the first tiles, rarely) or a
      // row is still all masked (alpha = 0 while O is 0).
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          o[4 * j] *= alpha[0], o[4 * j + 1] *= alpha[0];
          o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
        }
      }
      fence_proxy_async_smem();
      wg::consumer_sync(2);  // P complete

      // ---- O_c += P . V[:, 256c .. 256c + 255] ----
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        wgmma::wgmma_m64n256k16_bf16_bt(
            o, kmajor_sw128_desc(p_base + kk * 32),
            wg::mnmajor_sw128_desc(k_base + c * 4 * wg::kBlockBytes + kk * 16 * 128), 1);
      }
      wgmma_commit();
    }
    wgmma_wait<0>();
    fence_registers(o);

    // ---- epilogue: the row sums of both consumers, then out / lse or the split's partials ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    if (cc == 0) {
      sum_s[c * kHeadsPerCta + row0] = l[0];
      sum_s[c * kHeadsPerCta + row0 + 8] = l[1];
    }
    wg::consumer_sync(1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      l[h] = sum_s[row] + sum_s[kHeadsPerCta + row];
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h0 + row0 + 8 * h >= a.heads) continue;  // padding head
      const int64_t rh = int64_t{r} * a.heads + h0 + row0 + 8 * h;
      // Empty attended set iff l = 0 exactly: a NaN key (l NaN) is not empty and stays NaN.
      const bool attended_any = !(l[h] == 0.f);
      if (a.num_splits == 1) {
        const float inv = attended_any ? 1.f / l[h] : 0.f;
        bf16* out = a.out + rh * kVDim + c * 256 + 2 * cc;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const uint32_t v =
              attended_any ? pack_bf16x2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv) : 0u;
          *reinterpret_cast<uint32_t*>(out + j * 8) = v;
        }
        if (c == 0 && cc == 0) {
          a.lse[rh] = attended_any ? m[h] * kLn2 + logf(l[h]) : INFINITY;
          if (a.max_logit != nullptr) a.max_logit[rh] = attended_any ? m[h] * kLn2 : -INFINITY;
        }
      } else {
        const int64_t slot = split * (int64_t{a.rows} * a.heads) + rh;
        float* po = a.part_o + slot * kVDim + c * 256 + 2 * cc;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          *reinterpret_cast<float2*>(po + j * 8) =
              make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
        }
        if (c == 0 && cc == 0) {
          a.part_ml[slot * 2] = attended_any ? m[h] : -INFINITY;
          a.part_ml[slot * 2 + 1] = l[h];
        }
      }
    }
  }  // consumers
}

}  // namespace dsa::kernels::sparse_mla_cuda
