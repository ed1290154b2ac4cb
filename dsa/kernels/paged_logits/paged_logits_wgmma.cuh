// Paged MQA logits on Hopper's fp8 tensor cores (SPEC.md §3b) over the §3c schedule.
//
// One CTA = one schedule consumer i (G CTAs, one per SM), three warpgroups:
//   producer (warp 0 of warpgroup 0) walks the consumer's (request b, split k) range with the
//     normative loop (for_each_schedule_split, terminating by construction) and streams each
//     64-token page of the split into a ring of `stages` shared-memory stages: the keys by the
//     bulk tensor copy engine (one 3-D box, page = [64 tokens][128 B], 128-byte swizzle, the
//     layout wgmma reads), the page's 64 fp32 scales by a plain bulk copy, both completing on the
//     stage's `full` mbarrier. When the request changes it loads the request's q (all n H rows,
//     TMA boxes of 64 rows) and w into one of two q slots, completing on `qfull[slot]`.
//   consumers (warpgroups 1 and 2) take alternate pages. For each page and each group of <= 256
//     q rows: wgmma m64nNk32 e4m3 x e4m3 -> f32, M = the page's 64 tokens (keys = A), N = the
//     group's (query row, head) columns (q = B), K = 128 in four k-steps; then in registers
//     relu, the head weights, the head sum (two lane shuffles) and the key scale, and logits
//     stored for s < row_len[r] only. Keys are read once whatever n is: every row of a request is
//     an N column of the same MMA.
// Releases: a consumer's 4 warps arrive on the stage's `empty` barrier once its MMAs and epilogue
// are done. A q slot is reused by request g + 2 only after the last two pages of request g were
// consumed (the two consumers take pages in order, so those two imply all earlier ones).
// The header, hash, length and page-id checks are those of the mma.sync kernel they replace.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/wgmma_e4m3_ops.cuh"
#include "dsa/kernels/logits_schedule/logits_schedule.h"  // the §3c formulas (DSA_HD)

namespace dsa::kernels::paged_logits_wgmma {

using namespace hopper;  // NOLINT: the kernel's building blocks

inline constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
inline constexpr int kConsumers = 2;
inline constexpr int kDim = 128;    // D_i: one 128-byte swizzle row per token / q row
inline constexpr int kTokens = 64;  // P: one page = one M = 64 tile
inline constexpr int kKeyTileBytes = kTokens * kDim;                // 8192
inline constexpr int kScaleTileBytes = kTokens * 4;                 // 256
inline constexpr int kPageBytes = kKeyTileBytes + kScaleTileBytes;  // 8448, §2.2
inline constexpr int kQBoxRows = 64;                                // q rows per TMA box
inline constexpr int kMaxN = 256;  // wgmma N limit: columns per group
inline constexpr int kMaxStages = 32;
inline constexpr int kProducerRegs = 40, kConsumerRegs = 232;
// Shared memory of one CTA (227 KB on sm_90) less the base alignment and the static words.
inline constexpr int kSmemBudget = 227 * 1024 - 2048;

struct Item {    // one page of the ring, written by the producer before the stage's arrival
  int32_t b;     // request; -1 = the consumer's end
  int32_t s0;    // the page's first token
  int32_t qgen;  // which request of this CTA (q slot qgen & 1)
  int32_t unused;
};

struct Args {
  const float* w;              // [B_pad n, H]
  const int32_t* row_len;      // [B_pad n]
  const int32_t* req_slot;     // [B_pad]
  const int32_t* page_table;   // [table_rows, W]
  const uint8_t* pool;         // [num_pages, 8448]
  const int32_t* schedule;     // §3c
  float* logits;               // [rows, ld]
  cuda::DeviceErrorWord* err;  // §1.3
  int64_t ld;
  int32_t table_rows, W, num_pages;
  int32_t batch_pad, n, heads, G;
  int32_t checked;
  int32_t stages;      // ring depth, 2..kMaxStages
  int32_t q_rows_pad;  // n H rounded up to 64: rows of one q slot
  // Byte offsets from the 1024-aligned base of dynamic shared memory.
  uint32_t off_q, off_scales, off_w, off_items, off_bars;
};

// The layout of dynamic shared memory for a launch: [stages] key tiles, [2] q slots, [stages]
// scale tiles, [2] w slots, [stages] items, barriers full[stages], empty[stages], qfull[2].
struct SmemPlan {
  int32_t stages = 0, q_rows_pad = 0;
  uint32_t off_q = 0, off_scales = 0, off_w = 0, off_items = 0, off_bars = 0, bytes = 0;
};

inline SmemPlan plan_smem(int32_t n, int32_t heads) {
  SmemPlan s;
  s.q_rows_pad = (n * heads + kQBoxRows - 1) / kQBoxRows * kQBoxRows;
  const uint32_t q_bytes = 2u * s.q_rows_pad * kDim, w_bytes = 2u * s.q_rows_pad * 4;
  const uint32_t per_stage = kPageBytes + sizeof(Item) + 2 * 8;
  const uint32_t fixed = q_bytes + w_bytes + 2 * 8;
  s.stages = static_cast<int32_t>((kSmemBudget - fixed) / per_stage);
  if (s.stages > kMaxStages) s.stages = kMaxStages;
  s.off_q = uint32_t(s.stages) * kKeyTileBytes;
  s.off_scales = s.off_q + q_bytes;
  s.off_w = s.off_scales + uint32_t(s.stages) * kScaleTileBytes;
  s.off_items = s.off_w + w_bytes;
  s.off_bars = s.off_items + uint32_t(s.stages) * sizeof(Item);
  s.bytes = s.off_bars + (2 * uint32_t(s.stages) + 2) * 8 + 1024;  // + base alignment
  return s;
}

__device__ __forceinline__ void report(const Args& a, StatusCode code, int32_t row, int32_t value) {
  cuda::report_device_error(a.err, code, cuda::OpId::kPagedLogits, row, value);
}

// Always-on header check (§3b): words 0..6 equal the launch's. Returns the first mismatching
// word, or -1.
__device__ __forceinline__ int header_mismatch(const Args& a) {
  const int32_t expected[7] = {
      kScheduleMagic, kScheduleVersion, a.batch_pad, a.n, a.G, kScheduleSplitTokens, a.W};
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    if (a.schedule[i] != expected[i]) return i;
  }
  return -1;
}

// Checked mode, one CTA, every thread: len_hash of row_len against word 8 (FailedPrecondition)
// and 0 <= row_len <= W P (OutOfRange). The hash is a wrapping sum, so the partial order is free.
__device__ void check_lengths(const Args& a) {
  __shared__ uint32_t warp_hash[kThreads / 32];
  const int64_t rows = int64_t{a.batch_pad} * a.n, cap = int64_t{a.W} * kPageSize;
  uint32_t h = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    const int32_t len = a.row_len[r];
    h += static_cast<uint32_t>(len) * static_cast<uint32_t>(2 * r + 1);
    if (len < 0 || len > cap) report(a, StatusCode::kOutOfRange, int32_t(r), len);
  }
  for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) warp_hash[threadIdx.x >> 5] = h;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int i = 0; i < kThreads / 32; ++i) total += warp_hash[i];
    const int32_t word = a.schedule[kScheduleWordLenHash];
    if (static_cast<int32_t>(total) != word) {
      report(a, StatusCode::kFailedPrecondition, kScheduleWordLenHash, word);
    }
  }
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

// ---- Producer ----------------------------------------------------------------------------------
// One warp; lane 0 issues every copy and barrier operation, the other lanes walk along (the walk
// is uniform) so the schedule loop needs no broadcast.
__device__ void produce(const Args& a, const Smem& sm, const CUtensorMap* keys_map,
                        const CUtensorMap* q_map) {
  const int lane = threadIdx.x & 31;
  const bool leader = lane == 0;
  const int32_t pages_per_split = kScheduleSplitTokens / kPageSize;
  int32_t issued = 0;  // pages put in the ring so far
  int32_t qgen = -1, cur_b = -1, cur_row = 0;
  int32_t last_item0 = -1, last_item1 = -1;  // the last page of the request in q slot 0 / 1
  const int32_t q_rows = a.n * a.heads;
  const uint32_t q_tx = uint32_t(a.q_rows_pad) * kDim + uint32_t(q_rows) * 4;

  // Waits until ring item p (< issued) has been consumed; a no-op for items the ring already
  // waited for (p < issued - stages), whose stage may since hold later items.
  auto wait_consumed = [&](int32_t p) {
    if (p < 0 || p < issued - a.stages) return;
    mbar_wait(&sm.empty[p % a.stages], uint32_t(p / a.stages) & 1u);
  };

  // Page ids of the split after the current one, fetched one split ahead by lanes 0..3.
  int32_t guess_b = -1, guess_k = -1, guess_page = 0;

  const bool walked_to_end = for_each_schedule_split(
      a.schedule, blockIdx.x, a.row_len, a.batch_pad, a.n, a.W, kPageSize,
      [&](int32_t b, int32_t k, int32_t begin, int32_t end) {
        if (b != cur_b) {
          cur_b = b;
          cur_row = a.req_slot[b];
          if (cur_row < 0 || cur_row >= a.table_rows) {
            if (a.checked && leader) report(a, StatusCode::kOutOfRange, b, cur_row);
            cur_row = 0;  // unchecked: the reserved all-zero row (§2.5)
          }
          ++qgen;
          const int slot = qgen & 1;
          // The slot's previous request (qgen - 2) must be fully consumed.
          const int32_t last = slot == 0 ? last_item0 : last_item1;
          wait_consumed(last);
          wait_consumed(last - 1);
          if (leader) {
            mbar_arrive_expect_tx(&sm.qfull[slot], q_tx);
            uint8_t* dst = sm.q + size_t(slot) * a.q_rows_pad * kDim;
            const int32_t row0 = b * q_rows;
            for (int32_t c = 0; c * kQBoxRows < a.q_rows_pad; ++c) {
              tma_load_2d(dst + c * kQBoxRows * kDim, q_map, &sm.qfull[slot], 0,
                          row0 + c * kQBoxRows);
            }
            bulk_load(sm.w + size_t(slot) * a.q_rows_pad, a.w + int64_t{b} * q_rows,
                      uint32_t(q_rows) * 4, &sm.qfull[slot]);
          }
        }
        // Lane j < 4 holds the page id of page j of this split (pages past L_b: unused).
        const int32_t page_begin = begin + lane * kPageSize;
        int32_t page = 0;
        if (lane < pages_per_split && page_begin < end) {
          page = (b == guess_b && k == guess_k)
                     ? guess_page
                     : a.page_table[int64_t{cur_row} * a.W + page_begin / kPageSize];
          if (a.checked && (page < 1 || page >= a.num_pages)) {
            report(a, StatusCode::kOutOfRange, b, page);
          }
          if (page < 0 || page >= a.num_pages) page = 0;  // never dereferenced: the zero page
        }
        // Prefetch the next split's page ids (the likely next visit); used only if it is.
        guess_b = b;
        guess_k = k + 1;
        const int32_t next_page = (k + 1) * pages_per_split + lane;
        guess_page = lane < pages_per_split && next_page < a.W
                         ? a.page_table[int64_t{cur_row} * a.W + next_page]
                         : int32_t{0};
        for (int32_t j = 0; j < pages_per_split && begin + j * kPageSize < end; ++j) {
          const int32_t page_j = __shfl_sync(0xffffffffu, page, j);
          const int32_t stage = issued % a.stages;
          wait_consumed(issued - a.stages);
          if (leader) {
            sm.items[stage] = Item{b, begin + j * kPageSize, qgen, 0};
            mbar_arrive_expect_tx(&sm.full[stage], kPageBytes);
            tma_load_3d(sm.keys + size_t(stage) * kKeyTileBytes, keys_map, &sm.full[stage], 0, 0,
                        page_j);
            bulk_load(sm.scales + size_t(stage) * kTokens,
                      a.pool + int64_t{page_j} * kPageBytes + kKeyTileBytes, kScaleTileBytes,
                      &sm.full[stage]);
          }
          if ((qgen & 1) == 0) {
            last_item0 = issued;
          } else {
            last_item1 = issued;
          }
          ++issued;
        }
      });
  // One end marker per consumer (consumer c takes items c, c + 2, ...).
  for (int c = 0; c < kConsumers; ++c) {
    const int32_t stage = issued % a.stages;
    wait_consumed(issued - a.stages);
    if (leader) {
      sm.items[stage] = Item{-1, 0, 0, 0};
      mbar_arrive(&sm.full[stage]);
    }
    ++issued;
  }
  if (!walked_to_end && a.checked && leader) {
    report(a, StatusCode::kFailedPrecondition, int32_t(blockIdx.x), -1);  // §3c checked rule
  }
}

// ---- Consumers ---------------------------------------------------------------------------------
// One page against one group of N q columns (rows j0.. of request b, H heads each): the MMA, then
// the epilogue of this thread's two tokens (g and g + 8 of its warp's 16).
template <int H, int N>
__device__ __forceinline__ void page_group(const Args& a, uint32_t keys_addr, uint32_t q_addr,
                                           const float* w, const float* scales, int64_t row0,
                                           int32_t rows_valid, int32_t s0) {
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "=f"(acc[i]));  // defined by scale_d = 0
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < kDim / 32; ++s) {
    wgmma::wgmma_m64k32_e4m3<N>(acc, kmajor_sw128_desc(keys_addr + 32 * s),
                                kmajor_sw128_desc(q_addr + 32 * s), s > 0 ? 1 : 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(acc);

  // acc[4c + e]: token g, column 8c + 2t + e; acc[4c + 2 + e]: token g + 8 (wgmma D layout).
  constexpr int kRows = N / H, kBlocksPerRow = H / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = (threadIdx.x >> 5) & 3;
  float sum[kRows][2];
#pragma unroll
  for (int r = 0; r < kRows; ++r) sum[r][0] = sum[r][1] = 0.f;
#pragma unroll
  for (int c = 0; c < N / 8; ++c) {
    const float2 wv = *reinterpret_cast<const float2*>(w + 8 * c + 2 * t);
    const int r = c / kBlocksPerRow;
    sum[r][0] = fmaf(wv.x, fmaxf(acc[4 * c + 0], 0.f), sum[r][0]);
    sum[r][0] = fmaf(wv.y, fmaxf(acc[4 * c + 1], 0.f), sum[r][0]);
    sum[r][1] = fmaf(wv.x, fmaxf(acc[4 * c + 2], 0.f), sum[r][1]);
    sum[r][1] = fmaf(wv.y, fmaxf(acc[4 * c + 3], 0.f), sum[r][1]);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sum[r][e] += __shfl_xor_sync(0xffffffffu, sum[r][e], 1);
      sum[r][e] += __shfl_xor_sync(0xffffffffu, sum[r][e], 2);
    }
  }
  const int tok = warp * 16 + g;
  const float sc0 = scales[tok], sc1 = scales[tok + 8];
  const int32_t cap = a.W * kPageSize;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r % 4 != t || r >= rows_valid) continue;  // lane t stores rows t, t + 4, ...
    const int32_t v = a.row_len[row0 + r];
    const int32_t len = v < 0 ? 0 : (v > cap ? cap : v);  // unchecked neutralisation (§3b)
    float* out = a.logits + (row0 + r) * a.ld + s0 + tok;
    if (s0 + tok < len) out[0] = sum[r][0] * sc0;
    if (s0 + tok + 8 < len) out[8] = sum[r][1] * sc1;
  }
}

template <int H>
__device__ void consume(const Args& a, const Smem& sm, int consumer) {
  const int lane = threadIdx.x & 31;
  const int32_t q_rows = a.n * a.heads;
  int32_t cur_gen = -1;
  for (int32_t p = consumer;; p += kConsumers) {
    const int32_t stage = p % a.stages;
    mbar_wait(&sm.full[stage], uint32_t(p / a.stages) & 1u);
    const Item it = sm.items[stage];
    if (it.b < 0) break;
    const int slot = it.qgen & 1;
    if (it.qgen != cur_gen) {
      mbar_wait(&sm.qfull[slot], uint32_t(it.qgen >> 1) & 1u);
      cur_gen = it.qgen;
    }
    const uint32_t keys_addr = smem_u32(sm.keys + size_t(stage) * kKeyTileBytes);
    const uint32_t q_addr = smem_u32(sm.q + size_t(slot) * a.q_rows_pad * kDim);
    const float* w = sm.w + size_t(slot) * a.q_rows_pad;
    const float* scales = sm.scales + size_t(stage) * kTokens;
    for (int32_t col = 0; col < a.q_rows_pad; col += kMaxN) {
      const int32_t width = min(kMaxN, a.q_rows_pad - col);
      const int64_t row0 = int64_t{it.b} * a.n + col / H;
      const int32_t rows_valid = min(width, q_rows - col) / H;
      const uint32_t qa = q_addr + uint32_t(col) * kDim;
      if (width == 64) {
        page_group<H, 64>(a, keys_addr, qa, w + col, scales, row0, rows_valid, it.s0);
      } else if (width == 128) {
        page_group<H, 128>(a, keys_addr, qa, w + col, scales, row0, rows_valid, it.s0);
      } else if (width == 192) {
        if constexpr (H != 16) {  // n H <= 128 for H = 16
          page_group<H, 192>(a, keys_addr, qa, w + col, scales, row0, rows_valid, it.s0);
        }
      } else if constexpr (H != 16) {
        page_group<H, 256>(a, keys_addr, qa, w + col, scales, row0, rows_valid, it.s0);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&sm.empty[stage]);
  }
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1)
    paged_logits_wgmma_kernel(const __grid_constant__ Args a,
                              const __grid_constant__ CUtensorMap keys_map,
                              const __grid_constant__ CUtensorMap q_map) {
  extern __shared__ uint8_t smem_raw[];
  const int bad_word = header_mismatch(a);
  if (bad_word >= 0) {  // a schedule of another layout: no work at all
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      report(a, StatusCode::kFailedPrecondition, bad_word, a.schedule[bad_word]);
    }
    return;
  }
  if (a.batch_pad == 0) return;
  if (a.checked && blockIdx.x == 0) check_lengths(a);

  const Smem sm = carve(a, smem_raw);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(&sm.full[s], 1);   // the producer's arrival (+ the copies' bytes)
      mbar_init(&sm.empty[s], 4);  // the 4 warps of the consumer that took the page
    }
    mbar_init(&sm.qfull[0], 1);
    mbar_init(&sm.qfull[1], 1);
    fence_mbar_init();
    prefetch_tensor_map(&keys_map);
    prefetch_tensor_map(&q_map);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_release<kProducerRegs>();
    if (threadIdx.x < 32) produce(a, sm, &keys_map, &q_map);
  } else {
    regs_claim<kConsumerRegs>();
    consume<H>(a, sm, warpgroup - 1);
  }
}

}  // namespace dsa::kernels::paged_logits_wgmma
