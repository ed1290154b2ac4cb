// Ragged MQA logits on Hopper's fp8 tensor cores (SPEC.md §3d).
//
// One CTA = R = 256 / H_i consecutive query rows t0 .. t0 + R - 1 (4 at H_i = 64; the EXTEND rows
// of one request share ks, so their key ranges overlap almost entirely) and one of gridDim.y
// slices of those rows' key range, three warpgroups:
//   producer (warp 0 of warpgroup 0) walks the slice in splits of 256 keys aligned to 256,
//     skipping splits no row needs, and streams each split (up to four tiles of 64 keys) into one
//     stage of a shared-memory ring: the tiles' keys by the bulk tensor copy engine (a 2-D map of
//     the gathered [S][128 B] keys, 128-byte swizzle: the layout wgmma reads; keys past S are
//     zero-filled) and their fp32 scales by a 1-D map of kscale, all completing on the stage's
//     `full` mbarrier. The CTA's q rows ([R H_i][128 B], TMA boxes of 64 rows) and weights are
//     loaded once, with the first split.
//   consumers (warpgroups 1..3) take splits in turn and run the shared tile of
//     mqa_logits_wgmma_tile.cuh: M = 64 keys, N = the CTA's (row, head) columns in chunks of 128,
//     K = 128; relu, head weights and the head sum in registers; key c of row t is stored at
//     column c - ks[t] for ks[t] <= c < ke[t] only (the compressed layout).
// Keys are read once per CTA whatever R is; the slices (gridDim.y > 1) exist for few query rows
// over long key ranges, where one CTA per row group would leave most SMs idle.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/mqa_logits_wgmma_tile.cuh"

namespace dsa::kernels::ragged_logits_wgmma {

using namespace mqa_wgmma;  // NOLINT: the kernel's building blocks

inline constexpr int kConsumers = 3;
inline constexpr int kThreads = 128 * (1 + kConsumers);
inline constexpr int kColumns = 256;            // q columns (row, head) of one CTA
inline constexpr int kMaxRows = kColumns / 16;  // R at H_i = 16
inline constexpr int kQBoxRows = 64;            // q rows per TMA box
inline constexpr int kScaleTileBytes = kTokens * 4;
inline constexpr int kSplitTokens = kSplitPages * kTokens;  // 256 keys per ring stage
inline constexpr int kMaxStages = 16;
// 128 x 40 + 384 x 152 <= 65,536 registers.
inline constexpr int kProducerRegs = 40, kConsumerRegs = 152;
// Shared memory of one CTA (227 KB on sm_90) less the base alignment and the static words.
inline constexpr int kSmemBudget = 227 * 1024 - 2048;

struct Item {     // one split of the ring, written by the producer before the stage's arrival
  int32_t begin;  // the split's first key
  int32_t pages;  // tiles loaded, 1..4 (keys past the rows' ranges are never stored); 0 = end
};

struct Args {
  const float* w;              // [T, H]
  const int32_t* ks;           // [T]
  const int32_t* ke;           // [T]
  float* logits;               // [T, ld]
  cuda::DeviceErrorWord* err;  // §1.3
  int64_t ld;
  int32_t T, S;
  int32_t checked;
  int32_t stages;  // ring depth, 2..kMaxStages
  // Byte offsets from the 1024-aligned base of dynamic shared memory.
  uint32_t off_q, off_scales, off_w, off_items, off_bars;
};

// The layout of dynamic shared memory: [stages][4] key tiles, the q rows, [stages][4] scale
// tiles, the weights, [stages] items, barriers full[stages], empty[stages], qfull.
struct SmemPlan {
  int32_t stages = 0;
  uint32_t off_q = 0, off_scales = 0, off_w = 0, off_items = 0, off_bars = 0, bytes = 0;
};

inline SmemPlan plan_smem() {
  SmemPlan s;
  const uint32_t q_bytes = uint32_t{kColumns} * kDim, w_bytes = uint32_t{kColumns} * 4;
  const uint32_t per_stage =
      kSplitPages * (kKeyTileBytes + kScaleTileBytes) + uint32_t{sizeof(Item)} + 2 * 8;
  const uint32_t fixed = q_bytes + w_bytes + 8;
  s.stages = static_cast<int32_t>((kSmemBudget - fixed) / per_stage);
  if (s.stages > kMaxStages) s.stages = kMaxStages;
  s.off_q = uint32_t(s.stages) * kSplitPages * kKeyTileBytes;
  s.off_scales = s.off_q + q_bytes;
  s.off_w = s.off_scales + uint32_t(s.stages) * kSplitPages * kScaleTileBytes;
  s.off_items = s.off_w + w_bytes;
  s.off_bars = s.off_items + uint32_t(s.stages) * uint32_t{sizeof(Item)};
  s.bytes = s.off_bars + (2 * uint32_t(s.stages) + 1) * 8 + 1024;
  return s;
}

struct Smem {
  uint8_t* keys;
  uint8_t* q;
  float* scales;
  float* w;
  Item* items;
  uint64_t* full;
  uint64_t* empty;
  uint64_t* qfull;
};

__device__ __forceinline__ Smem carve(const Args& a, uint8_t* raw) {
  uint8_t* base = raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u);
  Smem s;
  s.keys = base;
  s.q = base + a.off_q;
  s.scales = reinterpret_cast<float*>(base + a.off_scales);
  s.w = reinterpret_cast<float*>(base + a.off_w);
  s.items = reinterpret_cast<Item*>(base + a.off_items);
  s.full = reinterpret_cast<uint64_t*>(base + a.off_bars);
  s.empty = s.full + a.stages;
  s.qfull = s.empty + a.stages;
  return s;
}

// The CTA's rows: [lo, hi) is row j's key range after the unchecked clamp (§3d; lo = hi for a
// row past T), `rows` of them real.
struct Rows {
  const int32_t* lo;
  const int32_t* hi;
  int32_t rows;
  int64_t t0;
};

__device__ __forceinline__ void report(const Args& a, int32_t row, int32_t value) {
  cuda::report_device_error(a.err, StatusCode::kOutOfRange, cuda::OpId::kRaggedLogits, row, value);
}

// Thread j < R: row t0 + j's range, checked (OutOfRange, by the first slice only) and clamped as
// in unchecked mode, so nothing out of contract is ever dereferenced.
__device__ __forceinline__ void load_row_range(const Args& a, int64_t t0, int rows, int32_t* lo,
                                               int32_t* hi) {
  const int j = threadIdx.x;
  int32_t ks = 0, ke = 0;
  if (j < rows) {
    const int64_t t = t0 + j;
    ks = a.ks[t];
    ke = a.ke[t];
    if (a.checked && blockIdx.y == 0) {
      if (ks < 0 || ks > a.S) {
        report(a, int32_t(t), ks);
      } else if (ke < ks || ke > a.S) {
        report(a, int32_t(t), ke);
      } else if (int64_t{ke} - ks > a.ld) {
        report(a, int32_t(t), ke - ks);
      }
    }
    ks = ks < 0 ? 0 : (ks > a.S ? a.S : ks);
    const int64_t end = min(int64_t{a.S}, int64_t{ks} + a.ld);
    ke = int32_t(ke < ks ? ks : (ke > end ? end : ke));
  }
  lo[j] = ks;
  hi[j] = ke;
}

// ---- Producer ----------------------------------------------------------------------------------
// One warp; lane 0 issues every copy and barrier operation, the other lanes walk along.
template <int H>
__device__ void produce(const Args& a, const Smem& sm, const Rows& r, const CUtensorMap* keys_map,
                        const CUtensorMap* scales_map, const CUtensorMap* q_map) {
  const bool leader = (threadIdx.x & 31) == 0;
  int32_t lo = a.S, hi = 0;
  for (int j = 0; j < r.rows; ++j) {
    if (r.lo[j] < r.hi[j]) lo = min(lo, r.lo[j]), hi = max(hi, r.hi[j]);
  }
  int32_t first = 0, count = 0;  // the rows' splits
  if (lo < hi) {
    first = lo / kSplitTokens;
    count = (hi + kSplitTokens - 1) / kSplitTokens - first;
  }
  const int32_t mine_begin = first + int32_t(int64_t{count} * blockIdx.y / gridDim.y);
  const int32_t mine_end = first + int32_t(int64_t{count} * (blockIdx.y + 1) / gridDim.y);

  bool q_loading = false;
  int32_t issued = 0;
  RingPos pos;  // where split `issued` goes; its stage was last used by issued - stages
  for (int32_t i = mine_begin; i < mine_end; ++i) {
    const int32_t c0 = i * kSplitTokens;
    bool needed = false;
    for (int j = 0; j < r.rows; ++j) {
      needed |= r.lo[j] < r.hi[j] && r.lo[j] < c0 + kSplitTokens && r.hi[j] > c0;
    }
    if (!needed) continue;
    if (!q_loading && leader) {
      const uint32_t q_bytes = uint32_t{kColumns} * kDim, w_bytes = uint32_t(r.rows) * H * 4;
      mbar_arrive_expect_tx(sm.qfull, q_bytes + w_bytes);
      const int32_t row0 = int32_t(r.t0 * H);
      for (int c = 0; c * kQBoxRows < kColumns; ++c) {
        tma_load_2d(sm.q + c * kQBoxRows * kDim, q_map, sm.qfull, 0, row0 + c * kQBoxRows);
      }
      bulk_load(sm.w, a.w + r.t0 * H, w_bytes, sm.qfull);
    }
    q_loading = true;
    const int32_t pages = min(kSplitPages, (hi - c0 + kTokens - 1) / kTokens);
    if (issued >= a.stages) mbar_wait(&sm.empty[pos.stage], pos.phase ^ 1u);
    if (leader) {
      sm.items[pos.stage] = Item{c0, pages};
      uint64_t* bar = &sm.full[pos.stage];
      mbar_arrive_expect_tx(bar, uint32_t(pages) * (kKeyTileBytes + kScaleTileBytes));
      uint8_t* keys = sm.keys + size_t(pos.stage) * kSplitPages * kKeyTileBytes;
      float* scales = sm.scales + size_t(pos.stage) * kSplitPages * kTokens;
      for (int j = 0; j < pages; ++j) {
        const int32_t key = c0 + j * kTokens;
        tma_load_2d(keys + j * kKeyTileBytes, keys_map, bar, 0, key);
        tma_load_1d(scales + j * kTokens, scales_map, bar, key * 4);
      }
    }
    ++issued;
    pos.advance(1, a.stages);
  }
  // One end marker per consumer (consumer c takes items c, c + kConsumers, ...).
  for (int c = 0; c < kConsumers; ++c) {
    if (issued >= a.stages) mbar_wait(&sm.empty[pos.stage], pos.phase ^ 1u);
    if (leader) {
      sm.items[pos.stage] = Item{0, 0};
      mbar_arrive(&sm.full[pos.stage]);
    }
    ++issued;
    pos.advance(1, a.stages);
  }
  // The CTA may not exit while its q copy is still writing shared memory.
  if (q_loading) mbar_wait(sm.qfull, 0);
}

// ---- Consumers ---------------------------------------------------------------------------------
// The rows of a chunk this thread stores (lane t: chunk rows 2t and 2t + 1) and their windows.
template <int H, int NC>
__device__ __forceinline__ ChunkRows chunk_rows(const Args& a, const Rows& r, int32_t row_first) {
  const int t = threadIdx.x & 3;
  ChunkRows cr;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int k = 2 * t + i;
    const int32_t j = row_first + k;
    const bool mine = k < NC / H && j < r.rows;
    cr.row[i].ptr = mine ? a.logits + (r.t0 + j) * a.ld : nullptr;
    cr.row[i].lo = mine ? r.lo[j] : 0;
    cr.row[i].hi = mine ? r.hi[j] : 0;
  }
  return cr;
}

template <int H>
__device__ void consume(const Args& a, const Smem& sm, const Rows& r, int consumer) {
  bool have_q = false;
  // The CTA's columns in chunks of 128 (kColumns is a multiple of 128); chunks past its rows skip.
  const int32_t chunks = (r.rows * H + 127) / 128;
  RingPos pos;
  pos.advance(consumer, a.stages);
  for (;;) {
    mbar_wait(&sm.full[pos.stage], pos.phase);
    const Item it = sm.items[pos.stage];
    if (it.pages == 0) break;
    if (!have_q) {
      mbar_wait(sm.qfull, 0);
      have_q = true;
    }
    const uint32_t keys_addr = smem_u32(sm.keys + size_t(pos.stage) * kSplitPages * kKeyTileBytes);
    const float* scales = sm.scales + size_t(pos.stage) * kSplitPages * kTokens;
    const uint32_t q_addr = smem_u32(sm.q);
    for (int32_t c = 0; c < chunks; ++c) {
      const int32_t col = c * 128;
      split_chunk<H, 128, true>(chunk_rows<H, 128>(a, r, col / H), it.begin, it.pages, keys_addr,
                                scales, q_addr, sm.w, col);
    }
    mbar_arrive(&sm.empty[pos.stage]);  // every consumer thread: its own reads are released
    pos.advance(kConsumers, a.stages);
  }
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1)
    ragged_logits_wgmma_kernel(const __grid_constant__ Args a,
                               const __grid_constant__ CUtensorMap keys_map,
                               const __grid_constant__ CUtensorMap scales_map,
                               const __grid_constant__ CUtensorMap q_map) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  static_assert(kColumns % H == 0 && kColumns / H <= kMaxRows && kColumns % 128 == 0);
  extern __shared__ uint8_t smem_raw[];
  __shared__ int32_t row_lo[kMaxRows], row_hi[kMaxRows];
  constexpr int R = kColumns / H;
  Rows r;
  r.t0 = int64_t{blockIdx.x} * R;
  r.rows = int32_t(min(int64_t{R}, int64_t{a.T} - r.t0));
  r.lo = row_lo;
  r.hi = row_hi;
  if (threadIdx.x < R) load_row_range(a, r.t0, r.rows, row_lo, row_hi);

  const Smem sm = carve(a, smem_raw);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(&sm.full[s], 1);                  // the producer's arrival (+ the copies' bytes)
      mbar_init(&sm.empty[s], kConsumerThreads);  // every thread of the consumer that took it
    }
    mbar_init(sm.qfull, 1);
    fence_mbar_init();
    if (a.S > 0) {  // with no keys the maps are unset and never used
      prefetch_tensor_map(&keys_map);
      prefetch_tensor_map(&scales_map);
    }
    prefetch_tensor_map(&q_map);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_release<kProducerRegs>();
    if (threadIdx.x < 32) produce<H>(a, sm, r, &keys_map, &scales_map, &q_map);
  } else {
    regs_claim<kConsumerRegs>();
    consume<H>(a, sm, r, warpgroup - 1);
  }
}

}  // namespace dsa::kernels::ragged_logits_wgmma
