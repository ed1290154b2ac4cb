#include "dsa/kernels/step_commit/step_commit_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "dsa/core/checked_mode.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {

constexpr int32_t kTablePoison = -7;  // entries of rows no request uses

Status compare_buffer(std::string_view name, const std::vector<int32_t>& got,
                      const std::vector<int32_t>& want) {
  if (got.size() != want.size()) {
    return internal_error(
        fmt::format("step_commit: {} has {} entries, expected {}", name, got.size(), want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return internal_error(
          fmt::format("step_commit: {}[{}] = {}, expected {}", name, i, got[i], want[i]));
    }
  }
  return ok_status();
}

}  // namespace

StepCommitParams StepCommitCase::params() {
  StepCommitParams p;
  p.target = target;
  p.accepted = accepted.data();
  p.emitted = emitted.data();
  p.requests = requests;
  p.drafts_per_request = d;
  p.tokens = tokens.data();
  p.token_rows = token_rows.empty() ? nullptr : token_rows.data();
  p.sample_row = sample_row.data();
  p.rows = {row_len.data(),   row_topk_len.data(), row_req.data(), row_page.data(),
            positions.data(), write_slot.data(),   ks.data(),      ke.data()};
  p.req_kv_len = req_kv_len.data();
  p.req_slot = req_slot.data();
  p.hidden_rows = hidden_rows.empty() ? nullptr : hidden_rows.data();
  p.page_table = {page_table.data(), table_rows, width, num_pages};
  p.topk = topk;
  return p;
}

StepCommitCase random_step_commit_case(StepCommitTarget target, int32_t requests, int32_t d,
                                       int32_t chain_step, uint64_t seed) {
  testing::Rng rng(seed);
  StepCommitCase c;
  c.target = target;
  c.requests = requests;
  c.d = d;
  c.chain_step = chain_step;
  c.topk = int32_t(rng.randint(1, 3)) * 64;
  const int32_t n = d + 1, B = requests, B_pad = requests + 1;
  c.table_rows = B + 3;
  c.width = int32_t(rng.randint(2, 6));
  c.num_pages = c.table_rows * c.width + 1;
  const std::vector<int32_t> slots = rng.permutation(1, c.table_rows);
  const std::vector<int32_t> pages = rng.permutation(1, c.num_pages);
  c.page_table.assign(size_t(c.table_rows * c.width), kTablePoison);
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t w = 0; w < c.width; ++w) {
      c.page_table[size_t(slots[size_t(b)] * c.width + w)] = pages[size_t(b * c.width + w)];
    }
  }
  const int32_t max_pos = c.width * kPageSize - 1;
  for (int32_t b = 0; b < B; ++b) {
    // Every count in turn while they last (so small B still meets a = 0 and a = d), then random.
    const int32_t a = b <= d ? (b * 5) % n : int32_t(rng.randint(0, d));
    c.accepted.push_back(a);
    // C_b + a + s must fit the row; edge rows sit at 0 and at the last position the table allows.
    const int32_t hi = max_pos - d - chain_step;
    const int32_t C = b % 4 == 1 ? 0 : b % 4 == 2 ? hi : int32_t(rng.randint(0, hi));
    c.committed.push_back(C);
    c.req_slot.push_back(slots[size_t(b)]);
    for (int32_t j = 0; j < n; ++j) {
      c.emitted.push_back(j <= a ? int32_t(rng.randint(0, 1000)) : -1);  // g_1..g_a, y, -1
    }
  }
  c.req_slot.push_back(0);  // the padded request
  c.req_kv_len.assign(size_t(B_pad), 0);
  if (target == StepCommitTarget::kDraftExtend) {
    for (int32_t r = 0; r < B_pad * n; ++r) {
      c.tokens.push_back(int32_t(rng.randint(0, 1000)));
      c.token_rows.push_back(r < B * n && r % n != d && rng.randint(0, 3) > 0 ? r : -1);
    }
    c.sample_row.assign(size_t(B_pad), -1);
    for (int32_t b = 0; b < B; ++b) c.req_kv_len[size_t(b)] = c.committed[size_t(b)] + n;
    return c;
  }
  // A DECODE built at a = 0: row b at C_b + s (SPEC.md §4.3), the padded row as §4.5's constants.
  const auto fill = [&](int32_t b, int32_t pos) {
    c.row_len.push_back(pos + 1);
    c.row_topk_len.push_back(std::min(pos + 1, c.topk));
    c.row_req.push_back(b);
    c.row_page.push_back(c.req_slot[size_t(b)]);
    c.positions.push_back(pos);
    const int32_t page = c.page_table[size_t(c.req_slot[size_t(b)] * c.width + pos / kPageSize)];
    c.write_slot.push_back(page * kPageSize + pos % kPageSize);
    c.ks.push_back(0);
    c.ke.push_back(0);
  };
  for (int32_t b = 0; b < B; ++b) {
    fill(b, c.committed[size_t(b)] + chain_step);
    c.req_kv_len[size_t(b)] = c.committed[size_t(b)] + chain_step + 1;
  }
  c.row_len.push_back(0), c.row_topk_len.push_back(0), c.row_req.push_back(B);
  c.row_page.push_back(0), c.positions.push_back(0), c.write_slot.push_back(-1);
  c.ks.push_back(0), c.ke.push_back(0);
  if (chain_step == 1) {
    for (int32_t b = 0; b < B_pad; ++b) c.hidden_rows.push_back(b < B ? b * n : -1);
  }
  c.tokens.assign(size_t(B_pad), 0);
  c.sample_row.assign(size_t(B_pad), -1);
  return c;
}

Status compare_step_commit(const StepCommitCase& before, const StepCommitCase& got) {
  StepCommitCase want = before;
  const int32_t n = before.d + 1;
  for (int32_t b = 0; b < before.requests; ++b) {
    const size_t i = size_t(b);
    const int32_t a = before.accepted[i];
    if (before.target == StepCommitTarget::kDraftExtend) {
      // Row j of request b: g_{j+1} where j != a and j < d, else y (SPEC.md §6.1).
      const int32_t y = before.emitted[i * size_t(n) + size_t(a)];
      for (int32_t j = 0; j < n; ++j) {
        const size_t r = i * size_t(n) + size_t(j);
        if (j == a || j == before.d) want.tokens[r] = y;
        if (j == a && !want.token_rows.empty()) want.token_rows[r] = -1;
      }
      want.sample_row[i] = b * n + a;
      continue;
    }
    const int32_t pos = before.committed[i] + a + before.chain_step;
    const int32_t slot = before.req_slot[i];
    want.positions[i] = pos;
    want.row_len[i] = pos + 1;
    want.row_topk_len[i] = std::min(pos + 1, before.topk);
    want.row_req[i] = b;
    want.row_page[i] = slot;
    want.write_slot[i] =
        before.page_table[size_t(slot * before.width + pos / kPageSize)] * kPageSize +
        pos % kPageSize;
    want.ks[i] = want.ke[i] = 0;
    want.req_kv_len[i] = pos + 1;
    if (!want.hidden_rows.empty()) want.hidden_rows[i] = b * n + a;
  }
  const std::pair<std::string_view, const std::vector<int32_t> StepCommitCase::*> buffers[] = {
      {"tokens", &StepCommitCase::tokens},
      {"token_rows", &StepCommitCase::token_rows},
      {"sample_row", &StepCommitCase::sample_row},
      {"row_len", &StepCommitCase::row_len},
      {"row_topk_len", &StepCommitCase::row_topk_len},
      {"row_req", &StepCommitCase::row_req},
      {"row_page", &StepCommitCase::row_page},
      {"positions", &StepCommitCase::positions},
      {"write_slot", &StepCommitCase::write_slot},
      {"ks", &StepCommitCase::ks},
      {"ke", &StepCommitCase::ke},
      {"req_kv_len", &StepCommitCase::req_kv_len},
      {"hidden_rows", &StepCommitCase::hidden_rows},
      {"accepted", &StepCommitCase::accepted},
      {"emitted", &StepCommitCase::emitted},
      {"req_slot", &StepCommitCase::req_slot},
      {"page_table", &StepCommitCase::page_table}};
  for (const auto& [name, member] : buffers) {
    DSA_RETURN_IF_ERROR(compare_buffer(name, got.*member, want.*member));
  }
  return ok_status();
}

Status check_step_commit(StepCommitFn op, int32_t requests, int32_t d, uint64_t seed) {
  if (requests < 1 || d < 1 || d > 7) {
    return invalid_argument(
        fmt::format("check_step_commit: requests = {}, d = {}: need requests >= 1 and d in [1, 7]",
                    requests, d));
  }
  ScopedCheckedMode checked(true);
  uint64_t k = 0;
  for (int32_t s = 0; s < std::max(d, 2); ++s) {  // s = 0: the draft extend; 1..d - 1: the chain
    const StepCommitTarget target =
        s == 0 ? StepCommitTarget::kDraftExtend : StepCommitTarget::kChainDecode;
    const StepCommitCase before =
        random_step_commit_case(target, requests, d, std::max(s, 1), seed + 977 * ++k);
    StepCommitCase got = before;
    DSA_RETURN_IF_ERROR(op(got.params()));
    DSA_RETURN_IF_ERROR(
        compare_step_commit(before, got)
            .with_context(s == 0 ? "draft extend" : fmt::format("chain step {}", s)));
  }
  return ok_status();
}

}  // namespace dsa::kernels
