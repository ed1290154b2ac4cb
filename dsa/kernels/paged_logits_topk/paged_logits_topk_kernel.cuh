// The fused paged logits + top-k kernel (SPEC.md §3b, §3e) on Hopper.
//
// One thread-block cluster of C CTAs per request b; CTA rank c owns the request's keys
// [c chunk, (c + 1) chunk) (chunk a multiple of the 64-token page), and the logits of all n rows
// over them live only in its shared memory. Four warpgroups:
//   logits phase, as the paged kernel: the producer warp streams the CTA's pages (two per ring
//     stage: keys by the bulk tensor copy engine into the 128-byte swizzle wgmma reads, scales by
//     a bulk copy) after loading the request's q and w once; three consumer warpgroups take the
//     stages in turn and run the shared wgmma tile (mqa_logits_wgmma_tile.cuh) with the paged
//     kernel's column chunking, so every logit is bit-identical to paged_logits_cuda's, storing
//     row j's scores of keys < row_len[j] into the CTA's row buffer.
//   selection, by the 384 consumer threads of every CTA of the cluster together (the producer
//     warpgroup takes part in the cluster barriers only): per batch of rows, three radix passes
//     over the fp32 order key (11, 11, 10 bits; NaN lowest, -0 == +0), each CTA histogramming
//     its own keys and then summing the C histograms over distributed shared memory (double
//     buffered, so one cluster barrier per pass), give the K-th key T and how many keys equal to
//     T are taken (the lowest positions: §3e ties). Then each CTA counts its winners (key > T)
//     and ties (== T) in position order, the cluster exchanges the counts, and each CTA writes
//     its winners and its share of the first ties as cache slots. A row of len <= K takes every
//     position. Slots [min(K, len), K) are -1.
// The number of cluster barriers depends only on n (launch constants), so every thread of every
// CTA takes the same barriers whatever the lengths are: no hang is possible.
#pragma once

#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/mqa_logits_wgmma_tile.cuh"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels::paged_logits_topk_detail {

using namespace mqa_wgmma;  // NOLINT: the kernel's building blocks
namespace cg = cooperative_groups;

inline constexpr int kConsumers = 3;
inline constexpr int kThreads = 128 * (1 + kConsumers);
inline constexpr int kSelectThreads = kConsumers * kConsumerThreads;  // 384
inline constexpr int kStagePages = 2;
inline constexpr int kScaleTileBytes = kTokens * 4;
inline constexpr int kPageBytes = kKeyTileBytes + kScaleTileBytes;  // 8448, §2.2
inline constexpr int kQBoxRows = 64;
inline constexpr int kMaxRows = 8;
inline constexpr int kMaxCluster = 8;
inline constexpr int kBins = 2048;  // 11-bit radix digits
inline constexpr int kHistBytes = kBins * 4;
// Consumer c takes items c, c + 3, ...: with fewer stages than consumers a consumer would wait on a
// stage whose earlier item is not yet issued (its parity wait passes on a stale phase) and the
// producer's third end marker would wait for an `empty` arrival no end marker gets (a hang).
// The key ring also doubles as 2 x `stages` row histograms.
inline constexpr int kMinStages = kConsumers;
inline constexpr int kMaxStages = 16;
inline constexpr int kRowPad =
    8;  // floats between row buffers: the epilogue's rows on distinct banks
inline constexpr int kProducerRegs = 40, kConsumerRegs = 152;
inline constexpr int kSmemBudget = 227 * 1024 - 2048;

struct Item {
  int32_t begin;  // the stage's first key; -1 = the consumer's end
  int32_t pages;  // 1..2
};

struct Args {
  const float* w;
  const int32_t* row_len;
  const int32_t* req_slot;
  const int32_t* page_table;
  const uint8_t* pool;
  int32_t* idx;
  cuda::DeviceErrorWord* err;
  int32_t table_rows, W, num_pages;
  int32_t batch_pad, n, heads, k;
  int32_t checked;
  int32_t cluster;        // C
  int32_t chunk;          // keys per CTA, a multiple of 64
  int32_t row_stride;     // floats between the CTA's row buffers (chunk + kRowPad)
  int32_t stages;         // ring depth, kMinStages..kMaxStages
  int32_t q_rows_pad;     // n H rounded up to 64
  int32_t rows_per_pass;  // rows selected together (their histograms share the ring)
  uint32_t off_q, off_scales, off_w, off_items, off_bars, off_logits, off_ids;
};

struct SmemPlan {
  int32_t stages = 0, q_rows_pad = 0, rows_per_pass = 0;
  uint32_t off_q = 0, off_scales = 0, off_w = 0, off_items = 0, off_bars = 0, off_logits = 0;
  uint32_t off_ids = 0, bytes = 0;
};

// The layout for a CTA holding n rows of `chunk` keys: [stages][2] key tiles (later the
// histograms), q, [stages][2] scale tiles, w, items, barriers, the row buffers, the CTA's page
// ids (neutralised, for the slots of the selection). stages = 0 when it does not fit.
inline SmemPlan plan_smem(int32_t n, int32_t heads, int32_t chunk) {
  SmemPlan s;
  s.q_rows_pad = (n * heads + kQBoxRows - 1) / kQBoxRows * kQBoxRows;
  const uint32_t q_bytes = uint32_t(s.q_rows_pad) * kDim, w_bytes = uint32_t(s.q_rows_pad) * 4;
  const uint32_t logits_bytes = uint32_t(n) * uint32_t(chunk + kRowPad) * 4;
  const uint32_t per_stage = kStagePages * kPageBytes + uint32_t{sizeof(Item)} + 2 * 8;
  const uint32_t ids_bytes = uint32_t(chunk / kTokens) * 4;
  const uint32_t fixed = q_bytes + w_bytes + 8 + logits_bytes + ids_bytes + 16;
  if (fixed + kMinStages * per_stage > uint32_t{kSmemBudget}) return s;
  s.stages = static_cast<int32_t>((kSmemBudget - fixed) / per_stage);
  if (s.stages > kMaxStages) s.stages = kMaxStages;
  const int32_t hist_rows = s.stages * kStagePages * kKeyTileBytes / (2 * kHistBytes);
  s.rows_per_pass = n < hist_rows ? n : hist_rows;
  s.off_q = uint32_t(s.stages) * kStagePages * kKeyTileBytes;
  s.off_scales = s.off_q + q_bytes;
  s.off_w = s.off_scales + uint32_t(s.stages) * kStagePages * kScaleTileBytes;
  s.off_items = s.off_w + w_bytes;
  s.off_bars = s.off_items + uint32_t(s.stages) * uint32_t{sizeof(Item)};
  s.off_logits = (s.off_bars + (2 * uint32_t(s.stages) + 1) * 8 + 15) / 16 * 16;
  s.off_ids = s.off_logits + logits_bytes;
  s.bytes = s.off_ids + ids_bytes + 1024;
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
  float* logits;
  int32_t* ids;    // [chunk / 64] the CTA's page ids, neutralised, written by the producer
  uint32_t* hist;  // [2][rows_per_pass][kBins] over the key ring, after the logits phase
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
  s.logits = reinterpret_cast<float*>(base + a.off_logits);
  s.ids = reinterpret_cast<int32_t*>(base + a.off_ids);
  s.hist = reinterpret_cast<uint32_t*>(base);
  return s;
}

// The CTA's request, in shared memory: its page-table row and each row's length, neutralised
// (§3b unchecked rules), and this CTA's key range [first, first + chunk).
struct Request {
  int32_t b, rank, first;
  int32_t table_row;
  int32_t stream;  // max row length: keys the request streams
  int32_t len[kMaxRows];
};

__device__ __forceinline__ void report(const Args& a, StatusCode code, int32_t row, int32_t value) {
  cuda::report_device_error(a.err, code, cuda::OpId::kPagedLogitsTopk, row, value);
}

// Reads the request (one thread; rank 0's reports checked-mode violations).
__device__ __forceinline__ Request load_request(const Args& a, int32_t b, int32_t rank) {
  Request r;
  r.b = b;
  r.rank = rank;
  r.first = rank * a.chunk;
  const int32_t cap = a.W * kPageSize;
  const bool reporter = a.checked && rank == 0;
  r.stream = 0;
#pragma unroll
  for (int j = 0; j < kMaxRows; ++j) {
    const int32_t v = j < a.n ? a.row_len[int64_t{b} * a.n + j] : 0;
    if (reporter && j < a.n && (v < 0 || v > cap)) {
      report(a, StatusCode::kOutOfRange, b * a.n + j, v);
    }
    r.len[j] = v < 0 ? 0 : (v > cap ? cap : v);
    r.stream = max(r.stream, r.len[j]);
  }
  const int32_t row = a.req_slot[b];
  const bool bad_row = row < 0 || row >= a.table_rows;
  if (reporter && bad_row && r.stream > 0) report(a, StatusCode::kOutOfRange, b, row);
  r.table_row = bad_row ? 0 : row;
  return r;
}

// ---- Logits phase: producer ---------------------------------------------------------------------
__device__ void produce(const Args& a, const Smem& sm, const Request& r,
                        const CUtensorMap* keys_map, const CUtensorMap* q_map) {
  const int lane = threadIdx.x & 31;
  const bool leader = lane == 0;
  const int32_t end = min(r.stream, r.first + a.chunk);
  const int32_t p0 = r.first / kTokens;
  const int32_t p1 = end > r.first ? (end + kTokens - 1) / kTokens : p0;
  if (p1 > p0 && leader) {
    const int32_t q_rows = a.n * a.heads;
    mbar_arrive_expect_tx(sm.qfull, uint32_t(a.q_rows_pad) * kDim + uint32_t(q_rows) * 4);
    for (int32_t c = 0; c * kQBoxRows < a.q_rows_pad; ++c) {
      tma_load_2d(sm.q + c * kQBoxRows * kDim, q_map, sm.qfull, 0, r.b * q_rows + c * kQBoxRows);
    }
    bulk_load(sm.w, a.w + int64_t{r.b} * q_rows, uint32_t(q_rows) * 4, sm.qfull);
  }
  int32_t issued = 0, window = -1, ids = 0;
  RingPos pos;
  for (int32_t pg = p0; pg < p1; pg += kStagePages) {
    // Page ids in windows of 32, one per lane, read once per window.
    if ((pg - p0) / 32 != window) {
      window = (pg - p0) / 32;
      const int32_t page = p0 + window * 32 + lane;
      ids = 0;
      if (page < p1) {
        const int32_t raw = a.page_table[int64_t{r.table_row} * a.W + page];
        if (a.checked && (raw < 1 || raw >= a.num_pages)) {
          report(a, StatusCode::kOutOfRange, r.b, raw);
        }
        ids = raw < 0 || raw >= a.num_pages ? 0 : raw;
        sm.ids[page - p0] = ids;  // for the selection's slots (read after the logits phase)
      }
    }
    const int32_t pages = min(kStagePages, p1 - pg);
    int32_t id[kStagePages];
#pragma unroll
    for (int j = 0; j < kStagePages; ++j) id[j] = __shfl_sync(0xffffffffu, ids, (pg - p0 + j) & 31);
    if (issued >= a.stages) mbar_wait(&sm.empty[pos.stage], pos.phase ^ 1u);
    if (leader) {
      sm.items[pos.stage] = Item{pg * kTokens, pages};
      uint64_t* bar = &sm.full[pos.stage];
      mbar_arrive_expect_tx(bar, uint32_t(pages) * kPageBytes);
      uint8_t* keys = sm.keys + size_t(pos.stage) * kStagePages * kKeyTileBytes;
      float* scales = sm.scales + size_t(pos.stage) * kStagePages * kTokens;
      for (int j = 0; j < pages; ++j) {
        tma_load_3d(keys + j * kKeyTileBytes, keys_map, bar, 0, 0, id[j]);
        bulk_load(scales + j * kTokens, a.pool + int64_t{id[j]} * kPageBytes + kKeyTileBytes,
                  kScaleTileBytes, bar);
      }
    }
    ++issued;
    pos.advance(1, a.stages);
  }
  for (int c = 0; c < kConsumers; ++c) {
    if (issued >= a.stages) mbar_wait(&sm.empty[pos.stage], pos.phase ^ 1u);
    if (leader) {
      sm.items[pos.stage] = Item{-1, 0};
      mbar_arrive(&sm.full[pos.stage]);
    }
    ++issued;
    pos.advance(1, a.stages);
  }
  if (p1 > p0) mbar_wait(sm.qfull, 0);  // the q copy has landed before anyone reuses the CTA
}

// ---- Logits phase: consumers --------------------------------------------------------------------
// Row j's scores of keys [first, min(len_j, first + chunk)) go to the CTA's row buffer j.
template <int H, int NC>
__device__ __forceinline__ ChunkRows chunk_rows(const Args& a, const Smem& sm, const Request& r,
                                                int32_t row_first) {
  const int t = threadIdx.x & 3;
  ChunkRows cr;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int k = 2 * t + i;
    const int32_t j = row_first + k;
    const bool mine = k < NC / H && j < a.n;
    const int32_t len = mine ? r.len[j] : 0;
    cr.row[i].ptr = mine ? sm.logits + size_t(j) * a.row_stride : nullptr;
    cr.row[i].lo = r.first;
    cr.row[i].hi = mine ? min(len, r.first + a.chunk) : 0;
  }
  return cr;
}

template <int H>
__device__ void consume(const Args& a, const Smem& sm, const Request& r, int consumer) {
  bool have_q = false;
  RingPos pos;
  pos.advance(consumer, a.stages);
  for (;;) {
    mbar_wait(&sm.full[pos.stage], pos.phase);
    const Item it = sm.items[pos.stage];
    if (it.begin < 0) break;
    if (!have_q) {
      mbar_wait(sm.qfull, 0);
      have_q = true;
    }
    const uint32_t keys_addr = smem_u32(sm.keys + size_t(pos.stage) * kStagePages * kKeyTileBytes);
    const float* scales = sm.scales + size_t(pos.stage) * kStagePages * kTokens;
    const uint32_t q_addr = smem_u32(sm.q);
    // The paged kernel's chunking (128 columns, an odd 64 last): bit-identical logits.
    int32_t col = 0;
    for (; col + 128 <= a.q_rows_pad; col += 128) {
      split_chunk<H, 128, true, kStagePages>(chunk_rows<H, 128>(a, sm, r, col / H), it.begin,
                                             it.pages, keys_addr, scales, q_addr, sm.w, col);
    }
    if (col < a.q_rows_pad) {
      split_chunk<H, 64, true, kStagePages>(chunk_rows<H, 64>(a, sm, r, col / H), it.begin,
                                            it.pages, keys_addr, scales, q_addr, sm.w, col);
    }
    mbar_arrive(&sm.empty[pos.stage]);
    pos.advance(kConsumers, a.stages);
  }
}

// ---- Selection ----------------------------------------------------------------------------------
// Barrier of the 384 selection threads (the consumer warpgroups), named barrier 1.
__device__ __forceinline__ void select_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kSelectThreads) : "memory");
}

// The §3e order as an unsigned key: larger = better, NaN -> 0 (lowest), -0 -> +0.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0u;
  const uint32_t u = __float_as_uint(v + 0.f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of x over the selection threads in thread order; *total gets the sum.
// Uses warp_sums[12]; ends with a barrier, so it can be called back to back.
__device__ __forceinline__ uint32_t select_scan(uint32_t x, uint32_t* warp_sums, uint32_t* total) {
  const int tid = threadIdx.x - 128, lane = tid & 31, warp = tid >> 5;
  uint32_t incl = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_sums[warp] = incl;
  select_sync();
  uint32_t before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kSelectThreads / 32; ++w) {
    const uint32_t v = warp_sums[w];
    before += w < warp ? v : 0u;
    all += v;
  }
  select_sync();
  *total = all;
  return before + incl - x;
}

// Per-row selection state of a batch, in static shared memory.
struct RowState {
  uint32_t prefix;         // the K-th key's digits found so far
  int32_t need;            // of the keys matching prefix, how many more are taken
  uint32_t winners, ties;  // this CTA's counts (key > T, key == T), for the peers
};

// A cluster-wide barrier every thread of every CTA takes (release / acquire: shared-memory writes
// before it are visible to the peers' distributed reads after it).
__device__ __forceinline__ void cluster_barrier() { cg::this_cluster().sync(); }

// The slot of the CTA's position i (the kPaged variant of §3e): its page id as the producer read
// and neutralised it (an id outside [0, num_pages) reads page 0).
__device__ __forceinline__ int32_t slot_of(const Smem& sm, const Request& r, int32_t i) {
  return sm.ids[i / kPageSize] * kPageSize + (r.first + i) % kPageSize;
}

// Selection thread tid's share of row j in this CTA: a contiguous segment [s0, s1) of the CTA's
// positions of odd length (so the threads' reads fall on distinct banks); `all` for a row of
// len <= K, which takes every position.
struct Segment {
  int32_t s0, s1;
  bool all;
};
__device__ __forceinline__ Segment segment(const Args& a, const Request& r, int32_t j, int tid) {
  const int32_t len = r.len[j];
  const int32_t mine = min(max(len - r.first, 0), a.chunk);
  const int32_t seg = ((mine + kSelectThreads - 1) / kSelectThreads) | 1;
  Segment g;
  g.s0 = min(tid * seg, mine);
  g.s1 = min(g.s0 + seg, mine);
  g.all = len <= a.k;
  return g;
}

__device__ void select_rows(const Args& a, const Smem& sm, const Request& r, RowState* state,
                            uint32_t* warp_sums) {
  const int tid = threadIdx.x - 128;
  cg::cluster_group cluster = cg::this_cluster();
  const int32_t K = a.k;
  uint32_t* offsets = sm.hist + size_t(a.rows_per_pass) * kBins;  // [rows_per_pass][384]
  for (int32_t j0 = 0; j0 < a.n; j0 += a.rows_per_pass) {
    const int32_t nb = min(a.rows_per_pass, a.n - j0);
    if (tid < nb) state[tid] = RowState{0u, K, 0u, 0u};
    select_sync();
    // Three radix passes (11, 11, 10 bits), histograms double buffered over the key ring.
#pragma unroll 1
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
      const uint32_t mask = pass == 2 ? 1023u : 2047u;
      uint32_t* hist = sm.hist + size_t(pass & 1) * a.rows_per_pass * kBins;
      for (int i = tid; i < nb * kBins; i += kSelectThreads) hist[i] = 0u;
      select_sync();
      for (int32_t jj = 0; jj < nb; ++jj) {
        const int32_t j = j0 + jj;
        const int32_t len = r.len[j];
        if (len <= K) continue;  // the whole row is taken
        const int32_t mine = min(max(len - r.first, 0), a.chunk);
        const uint32_t prefix = state[jj].prefix;
        const float* row = sm.logits + size_t(j) * a.row_stride;
        for (int32_t i = tid; i < mine; i += kSelectThreads) {
          const uint32_t key = order_key(row[i]);
          if (pass == 0 || (key >> (shift + (pass == 1 ? 11 : 10))) ==
                               (prefix >> (shift + (pass == 1 ? 11 : 10)))) {
            atomicAdd(&hist[jj * kBins + ((key >> shift) & mask)], 1u);
          }
        }
      }
      cluster_barrier();
      // Every CTA sums the cluster's histograms and finds the bin of the need-th key from the top.
      for (int32_t jj = 0; jj < nb; ++jj) {
        const int32_t len = r.len[j0 + jj];
        if (len <= K) continue;  // uniform across the CTA
        // Thread t < 256 owns the 8 bins [2047 - 8t - 7, 2047 - 8t] (bins above first).
        uint32_t counts[8] = {0, 0, 0, 0, 0, 0, 0, 0}, mine = 0;
        if (tid < kBins / 8) {
#pragma unroll
          for (int c = 0; c < kMaxCluster; ++c) {  // unrolled: every peer's loads in flight at once
            if (c < a.cluster) {
              const uint32_t* peer = cluster.map_shared_rank(hist + jj * kBins, c);
#pragma unroll
              for (int e = 0; e < 8; ++e) counts[e] += peer[kBins - 1 - 8 * tid - e];
            }
          }
#pragma unroll
          for (int e = 0; e < 8; ++e) mine += counts[e];
        }
        // Read before the scan's barriers: the one thread that finds the bin rewrites it.
        const uint32_t need = uint32_t(state[jj].need);
        uint32_t total = 0;
        uint32_t above = select_scan(mine, warp_sums, &total);
        if (tid < kBins / 8 && above < need && above + mine >= need) {
          bool found = false;
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            if (!found && above + counts[e] >= need) {
              const uint32_t bin = uint32_t(kBins - 1 - 8 * tid - e);
              state[jj].prefix |= bin << shift;
              state[jj].need = int32_t(need - above);
              found = true;
            }
            above += counts[e];
          }
        }
        select_sync();
      }
    }
    // Counts in position order, over each thread's segment.
    for (int32_t jj = 0; jj < nb; ++jj) {
      const Segment g = segment(a, r, j0 + jj, tid);
      const uint32_t T = state[jj].prefix;
      const float* row = sm.logits + size_t(j0 + jj) * a.row_stride;
      const bool all = g.all;
      uint32_t win = 0, tie = 0;
      for (int32_t i = g.s0; i < g.s1; ++i) {
        const uint32_t key = order_key(row[i]);
        win += all || key > T;
        tie += !all && key == T;
      }
      uint32_t total = 0;
      const uint32_t before = select_scan(win | (tie << 16), warp_sums, &total);
      if (tid == 0) {
        state[jj].winners = total & 0xffffu;
        state[jj].ties = total >> 16;
      }
      // This thread's offsets wait out the exchange in the second histogram buffer (the peers
      // finished reading it before the last pass's barrier; the last pass used the first).
      offsets[size_t(jj) * kSelectThreads + tid] = before;
    }
    cluster_barrier();  // every CTA's counts are set
    for (int32_t jj = 0; jj < nb; ++jj) {
      const int32_t j = j0 + jj;
      const int32_t len = r.len[j];
      const Segment g = segment(a, r, j, tid);
      const bool all = g.all;
      const uint32_t T = state[jj].prefix;
      const int32_t need = all ? 0 : state[jj].need;
      uint32_t base_w = 0, base_t = 0;
      for (int c = 0; c < r.rank; ++c) {
        const RowState* peer = cluster.map_shared_rank(state + jj, c);
        base_w += peer->winners;
        base_t += peer->ties;
      }
      const uint32_t before = offsets[size_t(jj) * kSelectThreads + tid];
      uint32_t win = base_w + (before & 0xffffu), tie = base_t + (before >> 16);
      int32_t* out = a.idx + (int64_t{r.b} * a.n + j) * K;
      const float* row = sm.logits + size_t(j) * a.row_stride;
      for (int32_t i = g.s0; i < g.s1; ++i) {
        const uint32_t key = order_key(row[i]);
        if (all || key > T) {
          out[win++] = slot_of(sm, r, i);
        } else if (key == T) {
          if (tie < uint32_t(need)) out[K - need + int32_t(tie)] = slot_of(sm, r, i);
          ++tie;
        }
      }
      if (r.rank == 0) {
        for (int32_t i = min(len, K) + tid; i < K; i += kSelectThreads) out[i] = -1;
      }
    }
    cluster_barrier();  // the peers read this batch's counts and offsets before they change
  }
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1)
    paged_logits_topk_kernel(const __grid_constant__ Args a,
                             const __grid_constant__ CUtensorMap keys_map,
                             const __grid_constant__ CUtensorMap q_map) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  extern __shared__ uint8_t smem_raw[];
  __shared__ RowState state[kMaxRows];
  __shared__ uint32_t warp_sums[kSelectThreads / 32];
  __shared__ Request r;
  const Smem sm = carve(a, smem_raw);
  if (threadIdx.x == 0) {
    const int32_t rank = int32_t(blockIdx.x) % a.cluster;
    r = load_request(a, int32_t(blockIdx.x) / a.cluster, rank);
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(&sm.full[s], 1);
      mbar_init(&sm.empty[s], kConsumerThreads);
    }
    mbar_init(sm.qfull, 1);
    fence_mbar_init();
    prefetch_tensor_map(&keys_map);
    prefetch_tensor_map(&q_map);
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const int32_t batches = (a.n + a.rows_per_pass - 1) / a.rows_per_pass;
  if (warpgroup == 0) {
    regs_release<kProducerRegs>();
    if (threadIdx.x < 32) produce(a, sm, r, &keys_map, &q_map);
    // The selection's cluster barriers: three passes and two exchanges per batch.
    for (int32_t i = 0; i < batches * 5; ++i) cluster_barrier();
  } else {
    regs_claim<kConsumerRegs>();
    consume<H>(a, sm, r, warpgroup - 1);
    select_sync();  // every row buffer is written and the key ring is free
    select_rows(a, sm, r, state, warp_sums);
  }
}

}  // namespace dsa::kernels::paged_logits_topk_detail
