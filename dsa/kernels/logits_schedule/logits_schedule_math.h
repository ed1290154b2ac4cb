// The paged-logits schedule of SPEC.md §3c, written once as DSA_HD functions (inv. 16): the CPU
// builder, the validator, the device builder and every consumer kernel run exactly this code, so
// they agree bit for bit and share the one clamped stream length L_b.
#pragma once

#include <cstdint>

#include "dsa/core/host_device.h"
#include "dsa/kernels/common/paged_cache.h"  // length_hash (§3c len_hash)

namespace dsa::kernels {

// ---- Header word layout ----------------------------------------------------------------------
inline constexpr int32_t kScheduleMagic = 0x31415344;
inline constexpr int32_t kScheduleVersion = 1;
inline constexpr int32_t kScheduleSplitTokens = 256;  // S_tok: one split = 4 pages of P = 64
inline constexpr int32_t kScheduleWordMagic = 0;
inline constexpr int32_t kScheduleWordVersion = 1;
inline constexpr int32_t kScheduleWordBatchPad = 2;
inline constexpr int32_t kScheduleWordRowsPerRequest = 3;
inline constexpr int32_t kScheduleWordNumConsumers = 4;
inline constexpr int32_t kScheduleWordSplitTokens = 5;
inline constexpr int32_t kScheduleWordPageTableWidth = 6;
inline constexpr int32_t kScheduleWordTotalSegments = 7;
inline constexpr int32_t kScheduleWordLenHash = 8;
inline constexpr int32_t kScheduleWordReserved = 9;  // 0: keeps the entries 8-byte aligned
inline constexpr int32_t kScheduleHeaderWords = 10;  // entry_i = words (10 + 2i, 11 + 2i)

// 10 + 2(G + 1): the header and the G + 1 entries.
DSA_HD int32_t schedule_words_for(int32_t num_consumers) {
  return kScheduleHeaderWords + 2 * (num_consumers + 1);
}

// ---- Formulas --------------------------------------------------------------------------------
// L_b = min(max_j max(row_len[b n + j], 0), W P). Lengths are read signed: a negative length
// (a padded row gone wrong, SPEC.md §9 row 2) counts as 0, never as ~4e9.
DSA_HD int32_t schedule_stream_length(const int32_t* row_len, int32_t b, int32_t n, int32_t W,
                                      int32_t P) {
  const int64_t cap = int64_t{W} * P;
  int64_t len = 0;
  for (int32_t j = 0; j < n; ++j) {
    const int32_t v = row_len[int64_t{b} * n + j];
    len = v > len ? v : len;
  }
  return static_cast<int32_t>(len < cap ? len : cap);
}

// seg_b = ceil(L_b / S_tok), in 64-bit so L_b near INT32_MAX cannot overflow.
DSA_HD int32_t schedule_segments(int32_t stream_length) {
  return static_cast<int32_t>((int64_t{stream_length} + kScheduleSplitTokens - 1) /
                              kScheduleSplitTokens);
}

DSA_HD int32_t schedule_request_segments(const int32_t* row_len, int32_t b, int32_t n, int32_t W,
                                         int32_t P) {
  return schedule_segments(schedule_stream_length(row_len, b, n, W, P));
}

// T_seg = pre_{B_pad} = sum over requests of seg_b.
DSA_HD int32_t schedule_total_segments(const int32_t* row_len, int32_t batch_pad, int32_t n,
                                       int32_t W, int32_t P) {
  int32_t total = 0;
  for (int32_t b = 0; b < batch_pad; ++b) total += schedule_request_segments(row_len, b, n, W, P);
  return total;
}

// start_i = i per + max(0, i - (G - rem)): the extra segment of the remainder goes to the *last*
// rem consumers, so with T_seg < G the first G - T_seg consumers get empty, in-bounds ranges.
DSA_HD int32_t schedule_start(int32_t i, int32_t num_consumers, int32_t total_segments) {
  const int32_t per = total_segments / num_consumers;
  const int32_t rem = total_segments % num_consumers;
  const int32_t extra = i - (num_consumers - rem);
  return i * per + (extra > 0 ? extra : 0);
}

// entry for a start: (b, start - pre_b) for the unique b with pre_b <= start < pre_b + seg_b, or
// (B_pad, 0) when start == T_seg (no such b exists).
DSA_HD void schedule_entry(int32_t start, const int32_t* row_len, int32_t batch_pad, int32_t n,
                           int32_t W, int32_t P, int32_t* entry_b, int32_t* entry_k) {
  int32_t pre = 0;
  for (int32_t b = 0; b < batch_pad; ++b) {
    const int32_t seg = schedule_request_segments(row_len, b, n, W, P);
    if (start < pre + seg) {
      *entry_b = b;
      *entry_k = start - pre;
      return;
    }
    pre += seg;
  }
  *entry_b = batch_pad;
  *entry_k = 0;
}

// Writes the whole schedule: schedule_words_for(G) words. Host params must be valid (1 <= n <= 8,
// G >= 1, W >= 1, T_seg fits in int32).
DSA_HD void schedule_build(const int32_t* row_len, int32_t batch_pad, int32_t n, int32_t G,
                           int32_t W, int32_t P, int32_t* schedule) {
  const int32_t total = schedule_total_segments(row_len, batch_pad, n, W, P);
  schedule[kScheduleWordMagic] = kScheduleMagic;
  schedule[kScheduleWordVersion] = kScheduleVersion;
  schedule[kScheduleWordBatchPad] = batch_pad;
  schedule[kScheduleWordRowsPerRequest] = n;
  schedule[kScheduleWordNumConsumers] = G;
  schedule[kScheduleWordSplitTokens] = kScheduleSplitTokens;
  schedule[kScheduleWordPageTableWidth] = W;
  schedule[kScheduleWordTotalSegments] = total;
  schedule[kScheduleWordLenHash] =
      static_cast<int32_t>(length_hash(row_len, int64_t{batch_pad} * n));  // bit pattern
  schedule[kScheduleWordReserved] = 0;
  for (int32_t i = 0; i <= G; ++i) {
    int32_t* e = schedule + kScheduleHeaderWords + 2 * i;
    schedule_entry(schedule_start(i, G, total), row_len, batch_pad, n, W, P, &e[0], &e[1]);
  }
}

// ---- The normative consumer loop -------------------------------------------------------------
// Consumer i walks (b, k) from entry_i up to entry_{i+1}, calling visit(b, k, token_begin,
// token_end) for split k of request b (tokens [k S_tok, min((k + 1) S_tok, L_b)), all rows of b).
// seg_b is recomputed from the launch's row_len, n and W. Every comparison is </>= on a strictly
// increasing pair bounded by B_pad, so any schedule, even one built from other lengths or with
// corrupt entries, ends after at most B_pad (1 + W P / S_tok) steps and never indexes row_len past
// B_pad n nor a token past W P. A start with b < 0 or k < 0 names splits that do not exist, so it
// is advanced to the first pair that can (this never reads row_len below 0).
// Returns false exactly when §3c's checked rule fires: the walk stopped off entry_{i+1} while
// b < B_pad (FailedPrecondition for the caller).
template <class F>
DSA_HD bool for_each_schedule_split(const int32_t* schedule, int32_t consumer,
                                    const int32_t* row_len, int32_t batch_pad, int32_t n, int32_t W,
                                    int32_t P, F&& visit) {
  const int32_t* entry = schedule + kScheduleHeaderWords + 2 * consumer;
  int32_t b = entry[0], k = entry[1];
  const int32_t eb = entry[2], ek = entry[3];
  if (b < 0) {
    b = 0;
    k = 0;
  }
  if (k < 0) k = 0;
  int32_t len_of = -1, len = 0;  // L_b of request len_of: read once per request, not per split
  while ((b < eb || (b == eb && k < ek)) && b < batch_pad) {
    if (b != len_of) {
      len = schedule_stream_length(row_len, b, n, W, P);
      len_of = b;
    }
    if (k >= schedule_segments(len)) {
      b += 1;
      k = 0;
      continue;
    }
    const int32_t begin = k * kScheduleSplitTokens;
    const int32_t end = len - begin < kScheduleSplitTokens ? len : begin + kScheduleSplitTokens;
    visit(b, k, begin, end);
    k += 1;
  }
  return (b == eb && k == ek) || b >= batch_pad;
}

}  // namespace dsa::kernels
