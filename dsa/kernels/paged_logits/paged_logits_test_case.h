// Shared fixture of the paged-logits tests: an owned problem (pool, page table, q, w, lengths,
// schedule) and the independent contiguous-copy formulation the tests compare against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels::paged_logits_test {

using testing::IndexerPoolBuffer;
using testing::PageTableBuffer;
using testing::Rng;

inline constexpr float kSentinel = -12345.f;

// One paged-logits problem with owned buffers; params() builds a schedule from row_len unless
// the test supplies one.
struct Case {
  int32_t batch_pad, n, heads, W;
  IndexerPoolBuffer pool;
  PageTableBuffer table;
  std::vector<uint8_t> q;
  std::vector<float> w, logits;
  std::vector<int32_t> row_len, req_slot, schedule;
  int32_t G = 4;
  int64_t ld;

  Case(int32_t batch_pad, int32_t n, int32_t heads, int32_t W, int32_t num_pages,
       int32_t table_rows)
      : batch_pad(batch_pad),
        n(n),
        heads(heads),
        W(W),
        pool(num_pages),
        table(table_rows, W, num_pages),
        q(size_t(batch_pad) * n * heads * kIndexHeadDim, 0),
        w(size_t(batch_pad) * n * heads, 0.f),
        row_len(size_t(batch_pad) * n, 0),
        req_slot(size_t(batch_pad), 0),
        ld((int64_t{W} * kPageSize + 255) / 256 * 256) {
    logits.assign(size_t(batch_pad) * n * ld, kSentinel);
  }
  void randomize_qw(Rng& rng) {
    q = rng.e4m3_vector(q.size());
    for (auto& v : w) v = rng.normal(0.f, 0.1f);
  }
  void build_schedule(const std::vector<int32_t>& lengths) {
    schedule.assign(size_t(logits_schedule_words(G)), 0);
    LogitsScheduleParams sp{lengths.data(),          batch_pad, n, G, W, kPageSize, schedule.data(),
                            int32_t(schedule.size())};
    ASSERT_TRUE(build_logits_schedule_ref(sp).ok());
  }
  PagedLogitsParams params() {
    if (schedule.empty()) build_schedule(row_len);
    PagedLogitsParams p;
    p.q = q.data();
    p.w = w.data();
    p.row_len = row_len.data();
    p.req_slot = req_slot.data();
    p.page_table = table.table();
    p.pool = pool.pool();
    p.schedule = schedule.data();
    p.schedule_words = int32_t(schedule.size());
    p.batch_pad = batch_pad;
    p.rows_per_request = n;
    p.num_heads = heads;
    p.num_consumers = G;
    p.logits = logits.data();
    p.logits_ld = ld;
    p.logits_rows = int64_t{batch_pad} * n;
    return p;
  }
  float at(int64_t r, int64_t s) const { return logits[size_t(r * ld + s)]; }
  void set_key(int32_t slot, std::vector<uint8_t> codes, float scale) {
    codes.resize(kIndexHeadDim, 0);
    std::memcpy(pool.bytes().data() + indexer_value_offset(pool.pool(), slot), codes.data(),
                kIndexHeadDim);
    std::memcpy(pool.bytes().data() + indexer_scale_offset(pool.pool(), slot), &scale, 4);
  }
};

// Independent formulation: the request's keys copied into a contiguous [L, 128] array by plain
// byte arithmetic, then a differently ordered long-double sum (heads descending).
struct Contiguous {
  std::vector<uint8_t> k8;
  std::vector<float> scale;
};
inline Contiguous copy_keys(Case& c, int32_t row, int32_t len) {
  Contiguous out;
  for (int32_t s = 0; s < len; ++s) {
    const int32_t page = c.table.at(row, s / 64);
    const uint8_t* base = c.pool.bytes().data() + size_t(page) * 8448;
    out.k8.insert(out.k8.end(), base + (s % 64) * 128, base + (s % 64) * 128 + 128);
    float sc;
    std::memcpy(&sc, base + 8192 + 4 * (s % 64), 4);
    out.scale.push_back(sc);
  }
  return out;
}
inline void expect_matches_contiguous(Case& c, int64_t r, const Contiguous& keys, int32_t len) {
  const uint8_t* q = c.q.data() + r * c.heads * 128;
  const float* w = c.w.data() + r * c.heads;
  for (int32_t s = 0; s < len; ++s) {
    long double sum = 0, mag = 0;
    for (int32_t h = c.heads - 1; h >= 0; --h) {
      long double dot = 0, abs_dot = 0;
      for (int32_t t = 127; t >= 0; --t) {
        long double prod = (long double)e4m3_to_float(e4m3{q[h * 128 + t]}) *
                           e4m3_to_float(e4m3{keys.k8[size_t(s) * 128 + t]});
        dot += prod;
        abs_dot += std::fabs(prod);
      }
      sum += w[h] * std::max(dot, (long double)0);
      mag += std::fabs(w[h]) * abs_dot;
    }
    const double ref = double(sum * keys.scale[size_t(s)]);
    const double m = double(mag * keys.scale[size_t(s)]);
    ASSERT_LE(std::fabs(c.at(r, s) - ref), std::ldexp(m, -21) + 1e-30)
        << "row " << r << " col " << s << " got " << c.at(r, s) << " ref " << ref;
  }
}

}  // namespace dsa::kernels::paged_logits_test
