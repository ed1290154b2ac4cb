// The sparse MLA attention kernel on Hopper's warpgroup MMAs (SPEC.md §3f decode, §3g prefill).
//
// One CTA = one query row r, a block of 64 heads [h0, h0 + 64) (heads >= H are zero rows of Q) and
// one split's range of 64-key tiles of the row's index list. 512 threads in four warpgroups:
//   producers (warpgroups 0, 1: keys 0..31 and 32..63 of every tile): gather the tile's selected
//     latent rows into one of two bf16 key tiles: bf16 cache rows by cp.async straight into the
//     tile; FP8-656 rows by cp.async into a staging area inside the tile, then dequantised in
//     place, exactly (e4m3 * 2^e is a bf16), by the warp that copied them (each warp owns eight
//     rows of a tile: no barrier between warps), their bf16 RoPE part by cp.async. Invalid keys are
//     zero rows (never read from memory) and flagged, so the consumers mask them to -inf. The
//     tile's completion is an mbarrier phase ("full", both producer warpgroups); the consumers hand
//     the tile back through another ("empty").
//   the score warpgroup (2) computes, per tile,
//     S[64 h, 64 keys] = Q[64, 576] . K[64 keys, 576]^T   (wgmma m64n64k16, 36 steps)
//     the online softmax in the log2 domain over the whole tile (no exchange with anyone), P (bf16)
//     and the rescale factor of each row to shared memory, then
//     O[64 h, dims 0..255] += P[64, 64] . K[64 keys, dims 0..255]   (2 x m64n128k16, 4 steps,
//     the value columns read MN-major from the same key tile, P from the warpgroup's registers)
//   the value warpgroup (3) rescales its O[64 h, dims 256..511] by the score warpgroup's factors
//     and adds P . K[64 keys, dims 256..511].
//   The two meet twice per tile: "P ready" (P and the factors written) and "P free" (the value
//   warpgroup's MMA has read them). The score warpgroup's S of tile i + 1 runs on the tensor cores
//   while the value warpgroup's P . V of tile i does; only the score warpgroup computes a softmax
//   (the value warpgroup waits for it at "P ready").
// A non-split CTA writes out = O / l (bf16) and lse = (m + log2 l) ln 2; a split CTA writes its
// unnormalised (O, m, l) to the workspace and sparse_mla_combine_kernel merges the splits in order.
//
// Shared memory: Q [64, 576] bf16 | key tiles 0, 1 [64, 576] bf16 | P [64, 64] bf16 | the rescale
// factors [64] fp32 | row sums [64] | key valid bytes [2 tiles][64] | mbarriers.
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

// Two producer warpgroups, each gathering (and dequantising) half of every tile's keys: one warp
// per scheduler cannot hide its own latencies, and the FP8 dequantisation is a chain of dependent
// conversions per chunk.
inline constexpr int kProducerWarpgroups = 2;
inline constexpr int kProducerThreads = 128 * kProducerWarpgroups;
inline constexpr int kConsumerThreads = 256;
inline constexpr int kThreads = kProducerThreads + kConsumerThreads;
inline constexpr int kKeysPerProducer = kTileKeys / kProducerWarpgroups;
inline constexpr int kPasses = kKeysPerProducer / 16;  // bf16 copy passes of 16 keys x 8 threads
// FP8: each warp copies and dequantises kKeysPerWarp rows of the tile, kLanesPerKey lanes per row
// (lane -> row lane % 8, chunk group g = lane / 8), a lane kChunksPerLane of the 16 raw 16-value
// chunks of each half of its row.
inline constexpr int kKeysPerWarp = kKeysPerProducer / 4;
inline constexpr int kLanesPerKey = 32 / kKeysPerWarp;
inline constexpr int kChunksPerLane = 16 / kLanesPerKey;
static_assert(kKeysPerProducer % 16 == 0, "keys per producer warpgroup: whole bf16 copy passes");
static_assert(kKeysPerWarp == 8,
              "eight rows per warp: eight lanes take eight rows, so the "
              "swizzled reads and writes are conflict-free");
static_assert(8 % kChunksPerLane == 0, "a lane's chunks of a row half lie in one scale block");
// Register split (setmaxnreg, which ptxas allocates each role by): the score warpgroup holds its
// O (128 fp32), S (32) and P's 16 packed registers, O and P live across its P . V MMAs (it spills
// below 208); the value warpgroup only its O; a producer thread its staged chunks and two tiles'
// list entries. The launch gives every thread 65536 / kThreads, in multiples of 8.
inline constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
inline constexpr int kScoreRegs = 208;
inline constexpr int kValueRegs = 160;
inline constexpr int kProducerRegs =
    (kThreads * kLaunchRegs - 128 * (kScoreRegs + kValueRegs)) / kProducerThreads / 8 * 8;  // 72
static_assert(kProducerThreads * kProducerRegs + 128 * (kScoreRegs + kValueRegs) <=
              kThreads * kLaunchRegs);

inline constexpr int kBlockBytes = kTileKeys * 128;           // one [64, 64] bf16 column block
inline constexpr int kTileBytes = kQkDim / 64 * kBlockBytes;  // 9 blocks: 73,728
inline constexpr int kQOff = 0;
inline constexpr int kKOff = kQOff + kTileBytes;  // two key tiles
inline constexpr int kPOff = kKOff + 2 * kTileBytes;
inline constexpr int kAlphaOff = kPOff + kBlockBytes;
inline constexpr int kSumOff = kAlphaOff + kHeadsPerCta * 4;
inline constexpr int kValidOff = kSumOff + kHeadsPerCta * 4;
inline constexpr int kBarOff = kValidOff + 2 * kTileKeys;
// + 1008: the dynamic base (16-byte aligned) is aligned up to the 1024 bytes of the swizzle atom.
inline constexpr int kSmemBytes = kBarOff + 4 * 8 + 1008;
static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 shared memory per block");

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

// Named barriers (0 is __syncthreads): the score and value warpgroups' two meeting points and
// their epilogue.
inline constexpr int kBarPReady = 1, kBarPFree = 2, kBarEpilogue = 3;

// Barrier ids are immediates: a barrier named by a register makes ptxas reserve all sixteen.
template <int kId>
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kConsumerThreads) : "memory");
}

// Sixteen e4m3 values times `scale` into sixteen bf16, as two 16-byte chunks. Per pair: e4m3x2 ->
// f16x2 (one hardware conversion), f16 -> f32 (exact), the two floats' high halves taken by a byte
// permute (exact: an e4m3 value has 4 significant bits, a bf16 8), then one bf16x2 multiply by the
// scale: exact for a power-of-two scale (SPEC.md §2.4), NaN kept. That is one conversion per pair
// where RNE-packing fp32 products took two, and Hopper's conversion pipe is narrow: 774 against
// 792 us at b 128 s_q 4 on the H200 (bench/RESULTS.md, 2026-12-06). Measured and dropped: the same
// permute after an fp32 multiply (no faster), and an integer-unit version rebasing the bits into
// bf16 (slower, 2026-12-02).
__device__ __forceinline__ void dequant16(uint4 raw, float scale, uint4& lo, uint4& hi) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t packed[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * h));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      const uint32_t hi16 = __byte_perm(__float_as_uint(f.x), __float_as_uint(f.y), 0x7632);
      const __nv_bfloat162 v =
          __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&hi16), __float2bfloat162_rn(scale));
      packed[2 * w + h] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
  lo = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  hi = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// The list entries one producer thread reads for a tile, loaded a tile ahead (their latency then
// hides behind the current tile's copies): for bf16 the key of each copy pass (16 keys per pass, 8
// threads per key), for FP8 the one key the thread copies and dequantises. Producer warpgroup pw
// owns the tile's keys [key_base, key_base + kKeysPerProducer), key_base = kKeysPerProducer * pw.
struct TileIndices {
  int32_t pass[kPasses];  // bf16
  int32_t own = -1;       // FP8
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
                                                         int32_t len, int t, int key_base,
                                                         int ptid) {
  TileIndices ix{};
  const int first = t * kTileKeys + key_base;
  if constexpr (kFormat == LatentFormat::kFp8_656) {
    ix.own = list_entry(a, r, len, first + kKeysPerWarp * (ptid >> 5) + (ptid % kKeysPerWarp));
  } else {
#pragma unroll
    for (int p = 0; p < kPasses; ++p)
      ix.pass[p] = list_entry(a, r, len, first + p * 16 + (ptid >> 3));
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

// The key of copy pass p for this thread and its attended index (-1 if not attended); the first
// thread of the key's eight writes its flag.
__device__ __forceinline__ int32_t pass_key(const MlaKernelArgs& a, int32_t r,
                                            const TileIndices& ix, int p, int key_base, int ptid,
                                            uint8_t* valid, int& key) {
  key = key_base + p * 16 + (ptid >> 3);
  const int32_t idx = attended(a, r, ix.pass[p], /*report=*/(ptid & 7) == 0);
  if ((ptid & 7) == 0) valid[key] = idx >= 0;
  return idx;
}

// bf16 cache: the warpgroup's 32 rows by cp.async straight into `tile` (8 threads per row, 128
// contiguous bytes per copy instruction), their flags into `valid`.
__device__ __forceinline__ void produce_bf16(const MlaKernelArgs& a, int32_t r,
                                             const TileIndices& ix, int key_base, int ptid,
                                             uint8_t* tile, uint8_t* valid) {
  const uint32_t base = hopper::smem_u32(tile);
  const uint8_t* dummy = reinterpret_cast<const uint8_t*>(a.q);  // mapped, for zero-fills
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    int key;
    const int32_t idx = pass_key(a, r, ix, p, key_base, ptid, valid, key);
    const uint8_t* src = idx >= 0 ? a.kv + int64_t{idx} * kBf16LatentBytes : dummy;
#pragma unroll
    for (int k = 0; k < kQkChunks / 8; ++k) {
      const int chunk = (ptid & 7) + 8 * k;
      hopper::cp_async16(base + tile_off(key, chunk), idx >= 0 ? src + chunk * 16 : dummy,
                         idx >= 0 ? 16 : 0);
    }
  }
}

// FP8-656: each warp's eight raw e4m3 rows land by cp.async (no registers) in a staging area
// inside the tile itself, raw chunk c (16 values) of row k where bf16 chunk 32 + c of the row goes
// (column blocks 4..7); the bf16 RoPE parts go straight to column block 8. The same warp then
// dequantises its rows in place, exactly (e4m3 * 2^e is a bf16): values 0..255 into column blocks
// 0..3, which hold no staging, then 256..511, whose raw chunks every lane reads before any
// overwrites the staging. Rows are owned by one warp, so warps sync only themselves: a warp whose
// rows land first converts them while the others still wait for theirs (against two barriers of
// the warpgroup per tile, on the H100: 755.6 against 761.0 us at b 128 s_q 4 in peer mode, 730
// against 768 at 512 rows in the benchmark's default mode; bench/RESULTS.md 2026-12-06).
// Lane (k, g) copies raw chunks g + 4m (four lanes, 64 contiguous bytes of a row per instruction)
// and converts chunks 4g .. 4g + 3 of each half of row k; eight consecutive lanes take eight rows,
// so the swizzled reads and writes are conflict-free.
__device__ __forceinline__ void produce_fp8(const MlaKernelArgs& a, int32_t r,
                                            const TileIndices& ix, int pw, int ptid, uint8_t* tile,
                                            uint8_t* valid) {
  const int lane = ptid & 31, g = lane / kKeysPerWarp;
  const int k = pw * kKeysPerProducer + kKeysPerWarp * (ptid >> 5) + lane % kKeysPerWarp;
  const uint32_t base = hopper::smem_u32(tile);
  const uint8_t* dummy = reinterpret_cast<const uint8_t*>(a.q);  // mapped, for zero-fills
  const int32_t idx = attended(a, r, ix.own, /*report=*/g == 0);
  if (g == 0) valid[k] = idx >= 0;
  const uint8_t* row = a.kv + int64_t{idx < 0 ? 0 : idx} * kFp8LatentBytes;
#pragma unroll
  for (int m = 0; m < 32 / kLanesPerKey; ++m) {  // raw chunks
    const int c = g + kLanesPerKey * m;
    hopper::cp_async16(base + tile_off(k, 32 + c), idx >= 0 ? row + c * 16 : dummy,
                       idx >= 0 ? 16 : 0);
  }
#pragma unroll
  for (int m = 0; m < 8 / kLanesPerKey; ++m) {  // RoPE chunks
    const int c = g + kLanesPerKey * m;
    hopper::cp_async16(base + tile_off(k, kLatentDim / 8 + c),
                       idx >= 0 ? row + kLatentDim + 16 + c * 16 : dummy, idx >= 0 ? 16 : 0);
  }
  const float* scales = reinterpret_cast<const float*>(row + kLatentDim);
  const int block = (kChunksPerLane * g) >> 3;  // the 128-value scale block of the chunks
  const float scale_a = idx >= 0 ? ldg_early(scales + block) : 0.f;
  const float scale_b = idx >= 0 ? ldg_early(scales + 2 + block) : 0.f;
  hopper::cp_async_commit();
  hopper::cp_async_wait_all();
  __syncwarp();  // the warp's rows staged
#pragma unroll
  for (int j = 0; j < kChunksPerLane; ++j) {
    const int u = kChunksPerLane * g + j;
    uint4 lo, hi;
    dequant16(*reinterpret_cast<const uint4*>(tile + tile_off(k, 32 + u)), scale_a, lo, hi);
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u)) = lo;
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u + 1)) = hi;
  }
  uint4 raw[kChunksPerLane];
#pragma unroll
  for (int j = 0; j < kChunksPerLane; ++j) {
    raw[j] = *reinterpret_cast<const uint4*>(tile + tile_off(k, 48 + kChunksPerLane * g + j));
  }
  __syncwarp();  // the warp's staging is read
#pragma unroll
  for (int j = 0; j < kChunksPerLane; ++j) {
    const int u = 16 + kChunksPerLane * g + j;
    uint4 lo, hi;
    dequant16(raw[j], scale_b, lo, hi);
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u)) = lo;
    *reinterpret_cast<uint4*>(tile + tile_off(k, 2 * u + 1)) = hi;
  }
}

// The flat (row, head) index of accumulator row row0 + 8h, or -1 for a padding head (>= H).
__device__ __forceinline__ int64_t row_head(const MlaKernelArgs& a, int32_t r, int h0, int row0,
                                            int h) {
  const int head = h0 + row0 + 8 * h;
  return head < a.heads ? int64_t{r} * a.heads + head : -1;
}

// 2^x by the special function unit alone: subnormal results flush to zero (a probability below
// 2^-126 of the row maximum's). exp2f compiles to the non-flushing ex2.approx.f32, which keeps
// them at the cost of more instructions per call on the softmax's critical path (variant smx2
// against HEAD, bench/RESULTS.md 2026-12-06).
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// An empty attended set iff l = 0 exactly: a NaN key (l NaN) is not empty and stays NaN.
__device__ __forceinline__ bool attended_any(float l) { return !(l == 0.f); }

// Writes one consumer warpgroup's 256 value dims (c = 0: dims 0..255, 1: 256..511) of the CTA's
// rows: out = O / l (bf16), or a split's unnormalised O. l: the complete row sums.
__device__ __forceinline__ void write_o(const MlaKernelArgs& a, int32_t r, int h0, int split, int c,
                                        int row0, int cc, const float (&o)[128],
                                        const float (&l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t rh = row_head(a, r, h0, row0, h);
    if (rh < 0) continue;
    if (a.num_splits == 1) {
      const bool any = attended_any(l[h]);
      const float inv = any ? 1.f / l[h] : 0.f;
      bf16* out = a.out + rh * kVDim + c * 256 + 2 * cc;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const uint32_t v =
            any ? pack_bf16x2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv) : 0u;
        *reinterpret_cast<uint32_t*>(out + j * 8) = v;
      }
    } else {
      const int64_t slot = split * (int64_t{a.rows} * a.heads) + rh;
      float* po = a.part_o + slot * kVDim + c * 256 + 2 * cc;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(po + j * 8) =
            make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      }
    }
  }
}

// The score warpgroup's row statistics (the thread of column pair 0 writes them): lse and
// max_logit, or a split's (m, l). m: row maxima in the log2 domain; l: the complete row sums.
__device__ __forceinline__ void write_row_stats(const MlaKernelArgs& a, int32_t r, int h0,
                                                int split, int row0, const float (&m)[2],
                                                const float (&l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t rh = row_head(a, r, h0, row0, h);
    if (rh < 0) continue;
    const bool any = attended_any(l[h]);
    if (a.num_splits == 1) {
      a.lse[rh] = any ? m[h] * kLn2 + logf(l[h]) : INFINITY;
      if (a.max_logit != nullptr) a.max_logit[rh] = any ? m[h] * kLn2 : -INFINITY;
    } else {
      const int64_t slot = split * (int64_t{a.rows} * a.heads) + rh;
      a.part_ml[slot * 2] = any ? m[h] : -INFINITY;
      a.part_ml[slot * 2 + 1] = l[h];
    }
  }
}

// P . V's B for k-step kk (keys 16 kk .. 16 kk + 15) and value columns 64 block .. 64 block + 127
// of the key tile at k_base.
__device__ __forceinline__ uint64_t value_desc(uint32_t k_base, int block, int kk) {
  return mnmajor_sw128_desc(k_base + block * kBlockBytes + kk * 16 * 128);
}

// The value warpgroup's O[:, 256 .. 511] += P . V of the key tile at k_base (4 k-steps of 16
// keys), P read from shared memory; issued and committed, not waited for.
__device__ __forceinline__ void issue_pv(float (&o)[128], uint32_t p_base, uint32_t k_base) {
  hopper::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk) {
    // Two N = 128 halves, not one N = 256: an instruction's operands must fit the launch's 128
    // registers per thread (ptxas checks each instruction against it, not against setmaxnreg).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      wgmma::wgmma_m64n128k16_bf16_bt(*reinterpret_cast<float(*)[64]>(o + 64 * half),
                                      hopper::kmajor_sw128_desc(p_base + kk * 32),
                                      value_desc(k_base, 4 + 2 * half, kk), 1);
    }
  }
  hopper::wgmma_commit();
}

// The score warpgroup's O[:, 0..255] += P . V with P from its own registers (pk: the softmax's
// packed pairs, pk[2j + h] = row row0 + 8h, keys 8j + 2cc, + 1), issued and committed.
__device__ __forceinline__ void issue_pv_rs(float (&o)[128], const uint32_t (&pk)[16],
                                            uint32_t k_base) {
  hopper::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk) {
    const uint32_t a[4] = {pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3]};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      wgmma::wgmma_m64n128k16_bf16_rs_bt(*reinterpret_cast<float(*)[64]>(o + 64 * half), a,
                                         value_desc(k_base, 2 * half, kk));
    }
  }
  hopper::wgmma_commit();
}

// Multiplies row row0's accumulators by alpha[0] and row row0 + 8's by alpha[1], unless every row
// of this warp keeps its scale: it rescales only when a row maximum grew (after the first tiles,
// rarely) or a row is still all masked (alpha = 0 while O is 0).
__device__ __forceinline__ void rescale_rows(float (&o)[128], const float (&alpha)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= alpha[0], o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
    }
  }
}

}  // namespace wg

// grid = (R * ceil(H / 64), 1, S), head blocks fastest: the head blocks of one row are neighbours,
// so the second reads the row's keys from L2. block = 512.
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
  float* alpha_s = reinterpret_cast<float*>(smem + wg::kAlphaOff);   // [64]
  float* sum_s = reinterpret_cast<float*>(smem + wg::kSumOff);       // [64]
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
    const int pw = tid >> 7, ptid = tid & 127, key_base = pw * wg::kKeysPerProducer;
    if (n > 0) {
      // Q: 64 heads x 576, padding heads zero-filled; completes with tile 0.
      for (int it = tid; it < kHeadsPerCta * kQkChunks; it += wg::kProducerThreads) {
        const int row = it / kQkChunks, chunk = it % kQkChunks;
        const bool ok = h0 + row < a.heads;
        const bf16* src = a.q + (int64_t{r} * a.heads + (ok ? h0 + row : 0)) * kQkDim + chunk * 8;
        cp_async16(smem_u32(q_s) + wg::tile_off(row, chunk), src, ok ? 16 : 0);
      }
    }
    wg::TileIndices ix = wg::load_tile_indices<kFormat>(a, r, len, t_begin, key_base, ptid);
    for (int i = 0; i < n; ++i) {
      const int b = i & 1;
      const wg::TileIndices cur = ix;
      if (i + 1 < n) {
        ix = wg::load_tile_indices<kFormat>(a, r, len, t_begin + i + 1, key_base, ptid);
      }
      if (i >= 2) mbar_wait(&empty[b], ((i >> 1) - 1) & 1);
      uint8_t* tile = smem + wg::kKOff + b * wg::kTileBytes;
      if constexpr (kFormat == LatentFormat::kBf16) {
        wg::produce_bf16(a, r, cur, key_base, ptid, tile, valid_s + b * kTileKeys);
      } else {
        wg::produce_fp8(a, r, cur, pw, ptid, tile, valid_s + b * kTileKeys);
      }
      cp_async_commit();
      cp_async_wait_all();
      fence_proxy_async_smem();  // this thread's tile writes, visible to the consumers' wgmma
      mbar_arrive(&full[b]);
    }
    return;
  }

  // Both consumer warpgroups: thread (warp cw, lane) holds rows row0 and row0 + 8 of the 64 heads
  // and column pair cc of every 8-column group of its accumulators.
  const int ctid = tid - wg::kProducerThreads;
  const int c = ctid >> 7;  // 0: the score warpgroup (value dims 0..255), 1: the value one
  const int cw = (ctid >> 5) & 3;
  const int row0 = cw * 16 + (lane >> 2), cc = lane & 3;
  // The accumulators are declared after each role's register claim: code before it is held to the
  // launch's 128 registers per thread.
  if (c == 0) {
    // ------------------------------- score warpgroup -------------------------------
    regs_claim<wg::kScoreRegs>();
    float o[128];
#pragma unroll
    for (int j = 0; j < 128; ++j) o[j] = 0.f;
    float m[2] = {-INFINITY, -INFINITY};  // running max (log2 domain), rows row0 and row0 + 8
    float l[2] = {0.f, 0.f};              // this thread's share of the running sums
    const uint32_t q_base = smem_u32(q_s);
    for (int i = 0; i < n; ++i) {
      const int b = i & 1;
      if (i > 0) {
        // P . V of tile i - 1 retired: its key tile goes back to the producers before this
        // warpgroup waits for tile i. (Issuing S of tile i first and waiting for P . V alone,
        // wait_group 1, was measured slower: 178.5 against 162.4 us, bf16 B 128 on the H100.)
        // Every thread arrives: an arrival releases only the arriving thread's own reads (of the
        // tile's valid flags here).
        wgmma_wait<0>();
        mbar_arrive(&empty[b ^ 1]);
      }
      mbar_wait(&full[b], (i >> 1) & 1);
      const uint32_t k_base = smem_u32(smem + wg::kKOff + b * wg::kTileBytes);

      // ---- S = Q . K^T over the tile's 64 keys ----
      float s[32];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kQkDim / 16; ++ks) {
        const uint32_t k_off = (ks >> 2) * wg::kBlockBytes + (ks & 3) * 32;
        wgmma::wgmma_m64n64k16_bf16(s, kmajor_sw128_desc(q_base + k_off),
                                    kmajor_sw128_desc(k_base + k_off), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();  // S of tile i
      fence_registers(s);
      fence_registers(o);

      // ---- online softmax (log2 domain) ----
      // A tile whose 64 valid flags are all set (every tile but a row's last partial one) takes no
      // mask selects; otherwise the flags are read a pair at a time. ex2 flushes subnormal
      // results to zero.
      // (The scale is not folded into the exponent's FFMA: s * c - m must round the product
      // first, or the row maximum's p is 2^(its rounding error), inf at |s c| ~ 2^100.)
      const uint8_t* valid = valid_s + b * kTileKeys;
      float tmax[2] = {-INFINITY, -INFINITY};
      const uint4* flags16 = reinterpret_cast<const uint4*>(valid);
      const uint4 f0 = flags16[0], f1 = flags16[1], f2 = flags16[2], f3 = flags16[3];
      const uint32_t all = f0.x & f0.y & f0.z & f0.w & f1.x & f1.y & f1.z & f1.w & f2.x & f2.y &
                           f2.z & f2.w & f3.x & f3.y & f3.z & f3.w;
      if (all == 0x01010101u) {
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          s[j] *= a.scale_log2;
          tmax[(j >> 1) & 1] = fmaxf(tmax[(j >> 1) & 1], s[j]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t flags = *reinterpret_cast<const uint16_t*>(valid + j * 8 + 2 * cc);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const bool ok = ((flags >> (8 * (e & 1))) & 0xffu) != 0u;
            s[4 * j + e] = ok ? s[4 * j + e] * a.scale_log2 : -INFINITY;
            tmax[e >> 1] = fmaxf(tmax[e >> 1], s[4 * j + e]);
          }
        }
      }
      float m_use[2], alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
        const float m_new = fmaxf(m[h], tmax[h]);
        m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: p = 0, alpha = 0
        alpha[h] = wg::ex2_ftz(m[h] - m_use[h]);
        m[h] = m_new;
        l[h] *= alpha[h];
      }
      uint32_t pk[16];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float p0 = wg::ex2_ftz(s[4 * j + 2 * h] - m_use[h]);
          const float p1 = wg::ex2_ftz(s[4 * j + 2 * h + 1] - m_use[h]);
          l[h] += p0 + p1;
          pk[2 * j + h] = pack_bf16x2(p0, p1);
        }
      }
      wg::rescale_rows(o, alpha);
      // The value warpgroup has read P of tile i - 1.
      if (i > 0) wg::consumer_sync<wg::kBarPFree>();
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          *reinterpret_cast<uint32_t*>(p_s + row * 128 + ((j ^ (row & 7)) << 4) + 4 * cc) =
              pk[2 * j + h];
        }
      }
      if (cc == 0) alpha_s[row0] = alpha[0], alpha_s[row0 + 8] = alpha[1];
      wg::issue_pv_rs(o, pk, k_base);  // this warpgroup's half: P from its registers
      fence_proxy_async_smem();
      wg::consumer_sync<wg::kBarPReady>();  // P and the factors written, for the value warpgroup
    }
    wgmma_wait<0>();
    fence_registers(o);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    if (cc == 0) sum_s[row0] = l[0], sum_s[row0 + 8] = l[1];
    wg::consumer_sync<wg::kBarEpilogue>();
    wg::write_o(a, r, h0, split, 0, row0, cc, o, l);
    if (cc == 0) wg::write_row_stats(a, r, h0, split, row0, m, l);
  } else {
    // ------------------------------- value warpgroup -------------------------------
    regs_claim<wg::kValueRegs>();
    float o[128];
#pragma unroll
    for (int j = 0; j < 128; ++j) o[j] = 0.f;
    for (int i = 0; i < n; ++i) {
      const int b = i & 1;
      wg::consumer_sync<wg::kBarPReady>();
      // Already complete (the score warpgroup waited for it before S); waited here too so this
      // warpgroup's reads of the tile are ordered after the producers' writes by the barrier.
      mbar_wait(&full[b], (i >> 1) & 1);
      const float alpha[2] = {alpha_s[row0], alpha_s[row0 + 8]};
      wg::rescale_rows(o, alpha);
      wg::issue_pv(o, smem_u32(p_s), smem_u32(smem + wg::kKOff + b * wg::kTileBytes));
      wgmma_wait<0>();
      fence_registers(o);
      mbar_arrive(&empty[b]);
      // A full barrier, not an arrival: the value warpgroup has nothing to do until P of the next
      // tile is ready anyway, and compute-sanitizer's racecheck orders only barriers both sides
      // wait on (bar.arrive here was reported as a race on the factors).
      if (i + 1 < n) wg::consumer_sync<wg::kBarPFree>();
    }
    wg::consumer_sync<wg::kBarEpilogue>();
    const float l[2] = {sum_s[row0], sum_s[row0 + 8]};
    wg::write_o(a, r, h0, split, 1, row0, cc, o, l);
  }
}

}  // namespace dsa::kernels::sparse_mla_cuda
