// Paged MQA logits on Hopper's fp8 tensor cores (SPEC.md §3b) over the §3c schedule.
//
// One CTA = one schedule consumer i (G CTAs, one per SM), three warpgroups:
//   producer (warp 0 of warpgroup 0) walks the consumer's (request b, split k) range with the
//     normative loop (for_each_schedule_split, terminating by construction) and streams each
//     split (up to 4 pages of 64 tokens) into one stage of a shared-memory ring: each page's keys
//     by the bulk tensor copy engine (one 3-D box, [64 tokens][128 B], 128-byte swizzle: the
//     layout wgmma reads), its 64 fp32 scales by a plain bulk copy, all completing on the stage's
//     `full` mbarrier. Page ids come from a 32-page window of the page-table row read by the
//     warp's lanes one window ahead (the next window of the request, or the first of the next
//     request), so the walk never waits on a page-table read. When the request changes it loads
//     the request's q (all n H rows, TMA boxes of 64 rows) and w into a q slot (two slots while
//     n H <= 256, so the next request's q loads while the last one's pages are computed).
//   consumers (warpgroups 1..3) take splits in turn. For each chunk of 128 (or a last 64) q
//     columns and each page of the split: wgmma m64nNk32 e4m3 x e4m3 -> f32 with M = the page's 64
//     tokens (keys = A) and N = (query row, head) columns (q = B), K = 128 in four k-steps, one
//     commit group per page, so the epilogue of a page (relu and the head sum as a bf16 mma.sync
//     of relu(S) by the head weights, key scale, stores for s < row_len only) can run while the
//     next page's MMA is in flight. Keys are read once whatever n is: every row of a request is an
//     N column of the same MMAs.
// Releases: every consumer thread arrives on the stage's `empty` barrier once done with it (an
// arrival releases only its own thread's reads). A q slot is reused only after the last
// kConsumers splits of its previous request were consumed (each consumer takes its splits in
// order, so those imply all earlier ones).
// The header, hash, length and page-id checks are those of SPEC.md §3b, as in the CPU reference.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/mqa_logits_wgmma_tile.cuh"
#include "dsa/kernels/common/wgmma_e4m3_ops.cuh"
#include "dsa/kernels/logits_schedule/logits_schedule.h"  // the §3c formulas (DSA_HD)

namespace dsa::kernels::paged_logits_wgmma {

using namespace hopper;     // NOLINT: the kernel's building blocks
using namespace mqa_wgmma;  // NOLINT: the consumers' tile

// A producer warpgroup and three consumer warpgroups: the epilogue is latency-bound, so more
// warps per scheduler hide more of it than deeper per-warp pipelines would.
inline constexpr int kConsumers = 3;
inline constexpr int kThreads = 128 * (1 + kConsumers);
static_assert(kTokens == kPageSize, "one page = one M tile");
static_assert(kSplitPages * kTokens == kScheduleSplitTokens, "one split = one schedule split");
inline constexpr int kScaleTileBytes = kTokens * 4;                 // 256
inline constexpr int kPageBytes = kKeyTileBytes + kScaleTileBytes;  // 8448, §2.2
inline constexpr int kQBoxRows = 64;                                // q rows per TMA box
inline constexpr int kMaxN = 256;  // wgmma N limit: columns per group
inline constexpr int kMaxRows = 8;
inline constexpr int kWindowPages = 32;  // page ids per producer window (one per lane)
inline constexpr int kMaxStages = 16;
// 128 x 40 + 384 x 152 <= 65,536 registers.
inline constexpr int kProducerRegs = 40, kConsumerRegs = 152;
// Shared memory of one CTA (227 KB on sm_90) less the base alignment and the static words.
inline constexpr int kSmemBudget = 227 * 1024 - 2048;

struct Item {     // one split of the ring, written by the producer before the stage's arrival
  int32_t b;      // request; -1 = the consumer's end
  int32_t begin;  // the split's first token
  int32_t pages;  // pages loaded, 1..4 (tokens past L_b in the last one are never stored)
  int32_t qgen;   // which request of this CTA (q slot qgen % q_slots)
  int32_t len[kMaxRows];  // row_len of the request's rows, neutralised (§3b unchecked rules)
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
  int32_t q_slots;     // 2 while n H <= 256, else 1
  int32_t q_rows_pad;  // n H rounded up to 64: rows of one q slot
  // Byte offsets from the 1024-aligned base of dynamic shared memory.
  uint32_t off_q, off_scales, off_w, off_items, off_bars;
};

// The layout of dynamic shared memory for a launch: [stages][4] key tiles, [q_slots] q slots,
// [stages][4] scale tiles, [q_slots] w slots, [stages] items, barriers full[stages],
// empty[stages], qfull[q_slots].
struct SmemPlan {
  int32_t stages = 0, q_slots = 0, q_rows_pad = 0;
  uint32_t off_q = 0, off_scales = 0, off_w = 0, off_items = 0, off_bars = 0, bytes = 0;
};

inline SmemPlan plan_smem(int32_t n, int32_t heads) {
  SmemPlan s;
  s.q_rows_pad = (n * heads + kQBoxRows - 1) / kQBoxRows * kQBoxRows;
  s.q_slots = s.q_rows_pad <= kMaxN ? 2 : 1;
  const uint32_t q_bytes = uint32_t(s.q_slots) * s.q_rows_pad * kDim;
  const uint32_t w_bytes = uint32_t(s.q_slots) * s.q_rows_pad * 4;
  const uint32_t per_stage = kSplitPages * kPageBytes + sizeof(Item) + 2 * 8;
  const uint32_t fixed = q_bytes + w_bytes + uint32_t(s.q_slots) * 8;
  s.stages = static_cast<int32_t>((kSmemBudget - fixed) / per_stage);
  if (s.stages > kMaxStages) s.stages = kMaxStages;
  s.off_q = uint32_t(s.stages) * kSplitPages * kKeyTileBytes;
  s.off_scales = s.off_q + q_bytes;
  s.off_w = s.off_scales + uint32_t(s.stages) * kSplitPages * kScaleTileBytes;
  s.off_items = s.off_w + w_bytes;
  s.off_bars = s.off_items + uint32_t(s.stages) * sizeof(Item);
  s.bytes = s.off_bars + (2 * uint32_t(s.stages) + uint32_t(s.q_slots)) * 8 + 1024;
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
// Lane l of a window holds the page id of page first + l of request b's page-table row (pages
// past W read as 0; ids are checked when used, not when read).
struct Window {
  int32_t b = -1, first = 0, id = 0;
};

// A page-table row for request b: req_slot, checked (OutOfRange) and neutralised to the reserved
// all-zero row 0 (§2.5) when outside [0, table_rows).
__device__ __forceinline__ int32_t table_row(const Args& a, int32_t b, int32_t row,
                                             bool report_it) {
  if (row >= 0 && row < a.table_rows) return row;
  if (report_it && a.checked) report(a, StatusCode::kOutOfRange, b, row);
  return 0;
}

// One warp; lane 0 issues every copy and barrier operation, the other lanes walk along (the walk
// is uniform) and hold the page-id windows.
__device__ void produce(const Args& a, const Smem& sm, const CUtensorMap* keys_map,
                        const CUtensorMap* q_map) {
  const int lane = threadIdx.x & 31;
  const bool leader = lane == 0;
  int32_t issued = 0;  // splits put in the ring so far
  RingPos pos;         // where split `issued` goes; its stage was last used by issued - stages
  int32_t qgen = -1, cur_b = -1, cur_row = 0, cur_pages = 0;
  int32_t next_b = -1, next_row = 0;  // req_slot of the request after cur_b, read ahead
  int32_t last_split[2] = {-1, -1};   // the last split of the request held by each q slot
  int32_t lens[kMaxRows];             // the current request's row lengths, neutralised
  const int32_t q_rows = a.n * a.heads, cap = a.W * kPageSize;
  const uint32_t q_tx = uint32_t(a.q_rows_pad) * kDim + uint32_t(q_rows) * 4;
  Window cur, ahead;

  // Waits until ring item p (< issued) has been consumed; a no-op for items the ring already
  // waited for (p < issued - stages), whose stage may since hold later items. (Rare: q slots.)
  auto wait_consumed = [&](int32_t p) {
    if (p < 0 || p < issued - a.stages) return;
    mbar_wait(&sm.empty[p % a.stages], uint32_t(p / a.stages) & 1u);
  };
  auto fetch = [&](int32_t b, int32_t row, int32_t first) {
    Window w;
    w.b = b;
    w.first = first;
    const int32_t page = first + lane;
    w.id = page < a.W ? a.page_table[int64_t{row} * a.W + page] : 0;
    return w;
  };
  auto covers = [](const Window& w, int32_t b, int32_t first) {
    return w.b == b && first >= w.first && first + kSplitPages <= w.first + kWindowPages;
  };

  const bool walked_to_end = for_each_schedule_split(
      a.schedule, blockIdx.x, a.row_len, a.batch_pad, a.n, a.W, kPageSize,
      [&](int32_t b, int32_t k, int32_t begin, int32_t end) {
        if (b != cur_b) {
          cur_b = b;
          cur_row = table_row(a, b, b == next_b ? next_row : a.req_slot[b], leader);
          int32_t stream = 0;
#pragma unroll
          for (int j = 0; j < kMaxRows; ++j) {
            const int32_t v = j < a.n ? a.row_len[int64_t{b} * a.n + j] : 0;
            lens[j] = v < 0 ? 0 : (v > cap ? cap : v);  // unchecked neutralisation (§3b)
            stream = max(stream, lens[j]);
          }
          cur_pages = (stream + kPageSize - 1) / kPageSize;
          next_b = b + 1;
          next_row = next_b < a.batch_pad ? a.req_slot[next_b] : 0;
          ++qgen;
          const int slot = a.q_slots == 2 ? (qgen & 1) : 0;
          // The slot's previous request (qgen - q_slots) must be fully consumed.
          // Consumers take splits in order, so its last kConsumers splits imply all earlier ones.
          const int32_t last = slot == 0 ? last_split[0] : last_split[1];
#pragma unroll
          for (int c = 0; c < kConsumers; ++c) wait_consumed(last - c);
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
        const int32_t first = k * kSplitPages;
        if (!covers(cur, b, first)) {
          cur = covers(ahead, b, first) ? ahead : fetch(b, cur_row, first);
          // Read the window after this one: the rest of this request, else the next request's
          // first pages (its row read ahead; neutralised here, checked when it becomes current).
          if (cur.first + kWindowPages < cur_pages) {
            ahead = fetch(b, cur_row, cur.first + kWindowPages);
          } else if (next_b < a.batch_pad) {
            ahead = fetch(next_b, table_row(a, next_b, next_row, false), 0);
          } else {
            ahead = Window{};
          }
        }
        const int32_t pages = (end - begin + kPageSize - 1) / kPageSize;
        int32_t ids[kSplitPages];
#pragma unroll
        for (int j = 0; j < kSplitPages; ++j) {
          ids[j] = __shfl_sync(0xffffffffu, cur.id, (first - cur.first + j) & 31);
        }
        if (issued >= a.stages) mbar_wait(&sm.empty[pos.stage], pos.phase ^ 1u);
        if (leader) {
          Item& it = sm.items[pos.stage];
          it.b = b;
          it.begin = begin;
          it.pages = pages;
          it.qgen = qgen;
#pragma unroll
          for (int j = 0; j < kMaxRows; ++j) it.len[j] = lens[j];
          uint64_t* bar = &sm.full[pos.stage];
          mbar_arrive_expect_tx(bar, uint32_t(pages) * kPageBytes);
          uint8_t* keys = sm.keys + size_t(pos.stage) * kSplitPages * kKeyTileBytes;
          float* scales = sm.scales + size_t(pos.stage) * kSplitPages * kTokens;
#pragma unroll
          for (int j = 0; j < kSplitPages; ++j) {
            if (j >= pages) break;
            int32_t page = ids[j];
            if (a.checked && (page < 1 || page >= a.num_pages)) {
              report(a, StatusCode::kOutOfRange, b, page);
            }
            if (page < 0 || page >= a.num_pages) page = 0;  // never dereferenced: the zero page
            tma_load_3d(keys + j * kKeyTileBytes, keys_map, bar, 0, 0, page);
            bulk_load(scales + j * kTokens, a.pool + int64_t{page} * kPageBytes + kKeyTileBytes,
                      kScaleTileBytes, bar);
          }
        }
        if (qgen % a.q_slots == 0) {
          last_split[0] = issued;
        } else {
          last_split[1] = issued;
        }
        ++issued;
        pos.advance(1, a.stages);
      });
  // One end marker per consumer (consumer c takes items c, c + kConsumers, ...).
  for (int c = 0; c < kConsumers; ++c) {
    if (issued >= a.stages) mbar_wait(&sm.empty[pos.stage], pos.phase ^ 1u);
    if (leader) {
      sm.items[pos.stage].b = -1;
      mbar_arrive(&sm.full[pos.stage]);
    }
    ++issued;
    pos.advance(1, a.stages);
  }
  if (!walked_to_end && a.checked && leader) {
    report(a, StatusCode::kFailedPrecondition, int32_t(blockIdx.x), -1);  // §3c checked rule
  }
}

// ---- Consumers ---------------------------------------------------------------------------------
// The rows of a chunk this thread stores (lane t: chunk rows 2t and 2t + 1), resolved once per
// split chunk: their output rows (null past the chunk or past n) and lengths (keys [0, len)).
template <int H, int NC>
__device__ __forceinline__ ChunkRows chunk_rows(const Args& a, const Item& it, int32_t row_first) {
  const int t = threadIdx.x & 3;
  ChunkRows cr;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 2 * t + i;
    const int32_t row = row_first + r;
    const bool mine = r < NC / H && row < a.n;
    cr.row[i].ptr = mine ? a.logits + (int64_t{it.b} * a.n + row) * a.ld : nullptr;
    cr.row[i].lo = 0;
    cr.row[i].hi = mine ? it.len[row] : 0;
  }
  return cr;
}

template <int H, int NC>
__device__ __forceinline__ void split_chunk(const Args& a, const Item& it, uint32_t keys_addr,
                                            const float* scales, uint32_t q_addr, const float* w,
                                            int32_t col) {
  mqa_wgmma::split_chunk<H, NC, false>(chunk_rows<H, NC>(a, it, col / H), it.begin, it.pages,
                                       keys_addr, scales, q_addr, w, col);
}

template <int H>
__device__ void consume(const Args& a, const Smem& sm, int consumer) {
  int32_t cur_gen = -1;
  RingPos pos;
  pos.advance(consumer, a.stages);
  for (;;) {
    mbar_wait(&sm.full[pos.stage], pos.phase);
    const Item& it = sm.items[pos.stage];
    if (it.b < 0) break;
    const int32_t qgen = it.qgen;
    const int slot = a.q_slots == 2 ? (qgen & 1) : 0;
    if (qgen != cur_gen) {
      mbar_wait(&sm.qfull[slot], uint32_t(a.q_slots == 2 ? qgen >> 1 : qgen) & 1u);
      cur_gen = qgen;
    }
    const uint32_t keys_addr = smem_u32(sm.keys + size_t(pos.stage) * kSplitPages * kKeyTileBytes);
    const float* scales = sm.scales + size_t(pos.stage) * kSplitPages * kTokens;
    const uint32_t q_addr = smem_u32(sm.q + size_t(slot) * a.q_rows_pad * kDim);
    const float* w = sm.w + size_t(slot) * a.q_rows_pad;
    // Columns in chunks of 128 (one page in flight), an odd 64 last (two in flight).
    int32_t col = 0;
    for (; col + 128 <= a.q_rows_pad; col += 128) {
      split_chunk<H, 128>(a, it, keys_addr, scales, q_addr, w, col);
    }
    if (col < a.q_rows_pad) split_chunk<H, 64>(a, it, keys_addr, scales, q_addr, w, col);
    mbar_arrive(&sm.empty[pos.stage]);  // every consumer thread: its own reads are released
    pos.advance(kConsumers, a.stages);
  }
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1)
    paged_logits_wgmma_kernel(const __grid_constant__ Args a,
                              const __grid_constant__ CUtensorMap keys_map,
                              const __grid_constant__ CUtensorMap q_map) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
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
      mbar_init(&sm.full[s], 1);                  // the producer's arrival (+ the copies' bytes)
      mbar_init(&sm.empty[s], kConsumerThreads);  // every thread of the consumer that took it
    }
    for (int s = 0; s < a.q_slots; ++s) mbar_init(&sm.qfull[s], 1);
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
