#include "dsa/kernels/logits_schedule/logits_schedule_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
using Split = std::array<int32_t, 4>;  // (b, k, token_begin, token_end)

// Independent formulation: the splits of every request in order, dealt to consumers by count
// (per, plus one for each of the last rem consumers), with no start/entry formulas.
std::vector<std::vector<Split>> expected_assignment(const std::vector<int32_t>& row_len,
                                                    int32_t batch, int32_t n, int32_t G,
                                                    int32_t W) {
  std::vector<Split> all;
  const int32_t cap = W * kPageSize;
  for (int32_t b = 0; b < batch; ++b) {
    int32_t len = 0;
    for (int32_t j = 0; j < n; ++j) len = std::max(len, row_len[size_t(b) * n + j]);
    len = std::min(len, cap);
    for (int32_t begin = 0, k = 0; begin < len; begin += kScheduleSplitTokens, ++k) {
      all.push_back({b, k, begin, std::min(begin + kScheduleSplitTokens, len)});
    }
  }
  const int32_t total = static_cast<int32_t>(all.size());
  std::vector<std::vector<Split>> out(static_cast<size_t>(G));
  size_t next = 0;
  for (int32_t i = 0; i < G; ++i) {
    const int32_t count = total / G + (i >= G - total % G ? 1 : 0);
    for (int32_t c = 0; c < count; ++c) out[size_t(i)].push_back(all[next++]);
  }
  return out;
}
}  // namespace

Status check_logits_schedule(BuildLogitsScheduleFn build, int32_t batch, int32_t n, int32_t G,
                             int32_t context_len, uint64_t seed) {
  if (batch < 0 || n < 1 || n > 8 || G < 1 || context_len < n) {
    return invalid_argument(fmt::format(
        "check_logits_schedule: batch = {}, n = {}, G = {}, context_len = {}: need batch >= 0, "
        "1 <= n <= 8, G >= 1, context_len >= n",
        batch, n, G, context_len));
  }
  testing::Rng rng(seed);
  const int32_t W = (context_len + kPageSize - 1) / kPageSize;
  std::vector<int32_t> row_len(size_t(batch) * n, 0);
  for (int32_t b = 0; b < batch; ++b) {
    if (rng.randint(0, 3) == 0) continue;  // padded request: all rows length 0
    const auto c = static_cast<int32_t>(rng.randint(0, context_len - n));
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b) * n + j] = c + j + 1;
  }
  std::vector<int32_t> schedule(size_t(logits_schedule_words(G)));
  LogitsScheduleParams p;
  p.row_len = row_len.data();
  p.batch_pad = batch;
  p.rows_per_request = n;
  p.num_consumers = G;
  p.page_table_width = W;
  p.schedule = schedule.data();
  p.schedule_capacity = static_cast<int32_t>(schedule.size());
  DSA_RETURN_IF_ERROR(build(p));
  DSA_RETURN_IF_ERROR(validate_logits_schedule(schedule.data(), p.schedule_capacity, row_len.data(),
                                               batch, n, G, W));

  const auto expected = expected_assignment(row_len, batch, n, G, W);
  for (int32_t i = 0; i < G; ++i) {
    std::vector<Split> got;
    const bool ended =
        for_each_schedule_split(schedule.data(), i, row_len.data(), batch, n, W, kPageSize,
                                [&](int32_t b, int32_t k, int32_t lo, int32_t hi) {
                                  got.push_back({b, k, lo, hi});
                                });
    if (!ended) {
      return internal_error(
          fmt::format("check_logits_schedule: consumer {} ended off its entry", i));
    }
    const auto& want = expected[size_t(i)];
    for (size_t s = 0; s < std::max(got.size(), want.size()); ++s) {
      if (s < got.size() && s < want.size() && got[s] == want[s]) continue;
      auto show = [](const std::vector<Split>& v, size_t s) {
        return s < v.size() ? fmt::format("(b {}, k {}, tokens [{}, {}))", v[s][0], v[s][1],
                                          v[s][2], v[s][3])
                            : std::string("nothing");
      };
      return internal_error(
          fmt::format("check_logits_schedule: consumer {} split {}: got {}, "
                      "expected {} (seed {})",
                      i, s, show(got, s), show(want, s), seed));
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
