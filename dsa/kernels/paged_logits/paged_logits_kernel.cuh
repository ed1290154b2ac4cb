// Paged MQA logits kernel (SPEC.md §3b) over the §3c schedule.
//
// One block = one schedule consumer i (G blocks). It walks its (request b, split k) range with the
// normative consumer loop (for_each_schedule_split, terminating by construction). A split is
// 256 tokens = 4 pages of request b: the block copies the keys ONCE into shared memory
// ([256, 128] e4m3 + [256] fp32 scales, via the page table) and computes every row of the request
// against them on the tensor cores: [n_g * H_i, 128] q x [128, 256] keys, n_g <= 4 rows at a
// time (n > 4: groups of 4 rows, each group one pipeline item over the same split, the repeat
// reads served by L2), then relu, w, the head sum and kscale, and writes logits[r, s] for
// s < row_len[r] only.
//
// Pipeline: kStages shared-memory stages, each holding one item's keys and a q slot; all 256
// threads issue cp.async for item i, then compute item i - kStages + 1. A stage's q slot is only
// re-copied when it last held another (request, group), so q is read once per request and stage.
// Page ids of the next split of the same request are prefetched into a register one item ahead.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/common/mqa_logits_mma.cuh"
#include "dsa/kernels/logits_schedule/logits_schedule.h"  // the §3c formulas (DSA_HD)

namespace dsa::kernels::paged_logits_detail {

using namespace mqa_mma;  // NOLINT: the kernel's building blocks

inline constexpr int kStages = 3;
inline constexpr int kStageKeys = 0;
inline constexpr int kStageScales = kStageKeys + kKeyBytes;
inline constexpr int kStageQ = kStageScales + kScaleBytes;
inline constexpr int kStageW = kStageQ + kQBytes;
inline constexpr int kStageBytes = kStageW + kWBytes;  // 67,584
inline constexpr int kSmemBytes = kStages * kStageBytes;
inline constexpr int kRowsPerGroup = 4;
inline constexpr int kPageBytes = kPageSize * (kDim + 4);  // 8448, §2.2

struct Args {
  const uint8_t* q;            // [B_pad n, H, 128] e4m3
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
};

// One pipeline item: split [begin, end) of request b, row group `group`, in stage `stage`.
struct Item {
  int32_t b, begin, end, group, stage;
};

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

// Checked mode, one block: len_hash of row_len against word 8 (FailedPrecondition) and
// 0 <= row_len <= W P (OutOfRange). The hash is a wrapping sum, so the partial order is free.
__device__ void check_lengths(const Args& a) {
  __shared__ uint32_t warp_hash[kWarps];
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
    for (int i = 0; i < kWarps; ++i) total += warp_hash[i];
    const int32_t word = a.schedule[kScheduleWordLenHash];
    if (static_cast<int32_t>(total) != word) {
      report(a, StatusCode::kFailedPrecondition, kScheduleWordLenHash, word);
    }
  }
}

// Selects element i (runtime) of a small register array without a runtime index.
template <int N>
__device__ __forceinline__ int32_t pick(const int32_t (&v)[N], int i) {
  int32_t out = v[0];
#pragma unroll
  for (int x = 1; x < N; ++x) out = x == i ? v[x] : out;
  return out;
}

// Computes one item from its stage: every row of the group against the split's keys.
__device__ __forceinline__ void compute_item(const Args& a, const Item& it, uint8_t* smem) {
  uint8_t* stage = smem + it.stage * kStageBytes;
  const int32_t rows = min(kRowsPerGroup, a.n - it.group * kRowsPerGroup);
  const int64_t row0 = int64_t{it.b} * a.n + it.group * kRowsPerGroup;
  const int32_t cap = a.W * kPageSize;
  int32_t len[kRowsPerGroup];
#pragma unroll
  for (int j = 0; j < kRowsPerGroup; ++j) {
    const int32_t v = j < rows ? a.row_len[row0 + j] : 0;
    len[j] = v < 0 ? 0 : (v > cap ? cap : v);  // unchecked neutralisation (§3b)
  }
  if (it.begin + (threadIdx.x >> 5) * 32 >= it.end) return;  // the warp's tokens are past L_b
  warp_tile_logits(stage + kStageKeys, reinterpret_cast<const float*>(stage + kStageScales),
                   stage + kStageQ, reinterpret_cast<const float*>(stage + kStageW), rows, a.heads,
                   [&](int j, int token, float v0, float v1) {
                     const int32_t s = it.begin + token, n = pick(len, j);
                     float* out = a.logits + (row0 + j) * a.ld + s;
                     if (s + 1 < n) {
                       *reinterpret_cast<float2*>(out) =
                           make_float2(v0, v1);  // s even, ld % 256 == 0
                     } else if (s < n) {
                       *out = v0;
                     }
                   });
}

__global__ void __launch_bounds__(kThreads, 1) paged_logits_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int bad_word = header_mismatch(a);
  if (bad_word >= 0) {  // a schedule of another layout: no work at all
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      report(a, StatusCode::kFailedPrecondition, bad_word, a.schedule[bad_word]);
    }
    return;
  }
  if (a.batch_pad == 0) return;
  if (a.checked && blockIdx.x == 0) check_lengths(a);

  const int groups = (a.n + kRowsPerGroup - 1) / kRowsPerGroup;
  const int page_part = threadIdx.x / 64;  // the page of the split this thread copies
  const int lane64 = threadIdx.x % 64;

  // Pipeline state (uniform across the block).
  Item pending[kStages];
  int num_pending = 0, produced = 0;
  int32_t slot_b[kStages], slot_group[kStages];  // what each stage's q slot holds
#pragma unroll
  for (int s = 0; s < kStages; ++s) slot_b[s] = slot_group[s] = -1;
  int32_t cur_b = -1, cur_row = 0;
  int32_t guess_b = -1, guess_k = -1, guess_page = 0;  // prefetched page id of (b, k)

  auto consume_oldest = [&](bool drain) {
    if (drain) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<kStages - 1>();
    }
    __syncthreads();
    compute_item(a, pending[0], smem);
    __syncthreads();  // the stage is free for the next copy
#pragma unroll
    for (int s = 0; s + 1 < kStages; ++s) pending[s] = pending[s + 1];
    --num_pending;
  };

  const bool walked_to_end = for_each_schedule_split(
      a.schedule, blockIdx.x, a.row_len, a.batch_pad, a.n, a.W, kPageSize,
      [&](int32_t b, int32_t k, int32_t begin, int32_t end) {
        if (b != cur_b) {
          cur_b = b;
          cur_row = a.req_slot[b];
          if (cur_row < 0 || cur_row >= a.table_rows) {
            if (a.checked) report(a, StatusCode::kOutOfRange, b, cur_row);
            cur_row = 0;  // unchecked: the reserved all-zero row (§2.5)
          }
        }
        // This thread's page of the split: pages past L_b are neither read nor checked.
        const int32_t page_begin = begin + page_part * kPageSize;
        const bool page_used = page_begin < end;
        int32_t page = 0;
        if (page_used) {
          page = (b == guess_b && k == guess_k)
                     ? guess_page
                     : a.page_table[int64_t{cur_row} * a.W + page_begin / kPageSize];
          if (a.checked && (page < 1 || page >= a.num_pages)) {
            report(a, StatusCode::kOutOfRange, b, page);
          }
          if (page < 0 || page >= a.num_pages) page = 0;  // never dereferenced: the zero page
        }
        for (int group = 0; group < groups; ++group) {
          const int stage = produced % kStages;
          uint8_t* st = smem + stage * kStageBytes;
          if (page_used) {
            const uint8_t* src = a.pool + int64_t{page} * kPageBytes;
            const uint32_t keys = smem_addr(st + kStageKeys);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              const int x = lane64 + 64 * i, o = x >> 3, c = x & 7;
              const bool valid = page_begin + o < end;
              cp_async16(keys + swizzled(page_part * kPageSize + o, c),
                         valid ? src + o * kDim + c * 16 : src, valid);
            }
            if (lane64 < 16) {
              cp_async16(smem_addr(st + kStageScales) + page_part * 256 + lane64 * 16,
                         src + kPageSize * kDim + lane64 * 16, true);
            }
          }
          if (pick(slot_b, stage) != b || pick(slot_group, stage) != group) {
            const int rows = min(kRowsPerGroup, a.n - group * kRowsPerGroup) * a.heads;
            const int64_t row0 = (int64_t{b} * a.n + group * kRowsPerGroup) * a.heads;
            load_q_async(st + kStageQ, reinterpret_cast<float*>(st + kStageW), a.q + row0 * kDim,
                         a.w + row0, rows);
#pragma unroll
            for (int s = 0; s < kStages; ++s) {
              if (s == stage) slot_b[s] = b, slot_group[s] = group;
            }
          }
          cp_async_commit();
          const Item item{b, begin, end, group, stage};
#pragma unroll
          for (int s = 0; s < kStages; ++s) {
            if (s == num_pending) pending[s] = item;
          }
          ++num_pending;
          ++produced;
          if (num_pending == kStages) consume_oldest(false);
        }
        // Prefetch the page id of split k + 1 (the likely next item); used only if it is.
        guess_b = b;
        guess_k = k + 1;
        const int32_t next_page = (k + 1) * (kScheduleSplitTokens / kPageSize) + page_part;
        guess_page =
            next_page < a.W ? a.page_table[int64_t{cur_row} * a.W + next_page] : int32_t{0};
      });
  while (num_pending > 0) consume_oldest(true);
  if (!walked_to_end && a.checked && threadIdx.x == 0) {
    report(a, StatusCode::kFailedPrecondition, int32_t(blockIdx.x), -1);  // §3c checked rule
  }
}

}  // namespace dsa::kernels::paged_logits_detail
