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
  p.shift_accepted = shift_accepted.empty() ? nullptr : shift_accepted.data();
  p.shift_emitted = shift_emitted.empty() ? nullptr : shift_emitted.data();
  p.kept_tokens = kept_tokens.empty() ? nullptr : kept_tokens.data();
  p.kept_count = int32_t(kept_tokens.size());
  p.draft_tokens = draft_tokens.empty() ? nullptr : draft_tokens.data();
  p.vocab = vocab;
  return p;
}

StepCommitCase random_step_commit_case(StepCommitTarget target, int32_t requests, int32_t d,
                                       int32_t chain_step, uint64_t seed, bool shifted,
                                       bool gather) {
  testing::Rng rng(seed);
  StepCommitCase c;
  c.target = target;
  c.requests = requests;
  c.d = d;
  c.chain_step = chain_step;
  c.topk = int32_t(rng.randint(1, 3)) * 64;
  shifted = shifted || target == StepCommitTarget::kVerify;
  const bool chain = target == StepCommitTarget::kChainDecode;
  const int32_t n = d + 1, B = requests, B_pad = requests + 1, per = chain ? 1 : n;
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
  // The rows' base position: the last row may sit at base + (shift d) + (a d) + (s or n - 1).
  const int32_t reach = d + (chain ? d + chain_step : n - 1);
  const int32_t hi = c.width * kPageSize - 1 - reach;
  for (int32_t b = 0; b < B; ++b) {
    // Every count in turn while they last (so small B still meets a = 0 and a = d), then random.
    const int32_t a = b <= d ? (b * 5) % n : int32_t(rng.randint(0, d));
    c.accepted.push_back(a);
    // Edge rows sit at 0 and at the last position the table allows.
    const int32_t C = b % 4 == 1 ? 0 : b % 4 == 2 ? hi : int32_t(rng.randint(0, hi));
    c.committed.push_back(C);
    c.req_slot.push_back(slots[size_t(b)]);
    for (int32_t j = 0; j < n; ++j) {
      c.emitted.push_back(j <= a ? int32_t(rng.randint(0, 1000)) : -1);  // g_1..g_a, y, -1
    }
    if (shifted) {
      const int32_t sa = b <= d ? (b * 3 + 1) % n : int32_t(rng.randint(0, d));
      c.shift_accepted.push_back(sa);
      for (int32_t j = 0; j < n; ++j) {
        c.shift_emitted.push_back(j <= sa ? int32_t(rng.randint(0, 1000)) : -1);
      }
    }
  }
  c.req_slot.push_back(0);  // the padded request
  c.req_kv_len.assign(size_t(B_pad), 0);
  for (int32_t r = 0; r < B_pad * per; ++r) {
    c.tokens.push_back(int32_t(rng.randint(0, 1000)));
    c.token_rows.push_back(!chain && r < B * n && r % n != d && rng.randint(0, 3) > 0 ? r : -1);
  }
  c.sample_row.assign(size_t(B_pad), -1);
  // The forward as the host builds it: request b's rows at C_b + s or C_b + j (SPEC.md §4.3), the
  // padded request's as §4.5's constants.
  for (int32_t b = 0; b < B; ++b) {
    const int32_t base = c.committed[size_t(b)] + (chain ? chain_step : 0);
    for (int32_t j = 0; j < per; ++j) {
      const int32_t pos = base + j;
      c.row_len.push_back(pos + 1);
      c.row_topk_len.push_back(std::min(pos + 1, c.topk));
      c.row_req.push_back(b);
      c.row_page.push_back(c.req_slot[size_t(b)]);
      c.positions.push_back(pos);
      const int32_t page = c.page_table[size_t(c.req_slot[size_t(b)] * c.width + pos / kPageSize)];
      c.write_slot.push_back(page * kPageSize + pos % kPageSize);
      c.ks.push_back(0);
      c.ke.push_back(0);
    }
    c.req_kv_len[size_t(b)] = base + per;
  }
  for (int32_t j = 0; j < per; ++j) {
    c.row_len.push_back(0), c.row_topk_len.push_back(0), c.row_req.push_back(B);
    c.row_page.push_back(0), c.positions.push_back(0), c.write_slot.push_back(-1);
    c.ks.push_back(0), c.ke.push_back(0);
  }
  if (chain && chain_step == 1) {
    for (int32_t b = 0; b < B_pad; ++b) c.hidden_rows.push_back(b < B ? b * n : -1);
  }
  if (gather && chain) {
    c.vocab = 1000;
    for (int32_t b = 0; b < B_pad; ++b) {
      const int64_t k = rng.randint(0, 9);  // -1 (no eligible token) and past-vocab ids among them
      c.draft_tokens.push_back(k == 0   ? -1
                               : k == 1 ? c.vocab + int32_t(rng.randint(0, 3))
                                        : int32_t(rng.randint(0, c.vocab - 1)));
    }
    // Every case meets both edges: no token, and the first id past the vocabulary.
    c.draft_tokens[0] = -1;
    c.draft_tokens[size_t(std::min(1, B - 1))] = c.vocab;
  } else if (gather) {
    for (int32_t r = 0; r + 2 < B * n; ++r) {
      c.kept_tokens.push_back(int32_t(rng.randint(2000, 2999)));
    }
    if (c.kept_tokens.empty()) c.kept_tokens.push_back(2000);
    // Kept entries anywhere in the kept tokens (the engine's cross requests), and the first listed
    // row's entry just past them (skipped).
    const int32_t kept = int32_t(c.kept_tokens.size());
    bool past = false;
    for (int32_t& e : c.token_rows) {
      if (e < 0) continue;
      e = past ? int32_t(rng.randint(0, kept + 1)) : kept;
      past = true;
    }
  }
  return c;
}

Status compare_step_commit(const StepCommitCase& before, const StepCommitCase& got) {
  StepCommitCase want = before;
  const int32_t d = before.d, n = d + 1;
  const bool chain = before.target == StepCommitTarget::kChainDecode;
  const int32_t per = chain ? 1 : n;
  for (int32_t b = 0; b < before.requests; ++b) {
    const size_t i = size_t(b);
    const int32_t a = before.accepted[i];
    const int32_t shift = before.shift_accepted.empty() ? 0 : before.shift_accepted[i];
    // Row j of request b at C_b + shift_b (+ a_b + s): SPEC.md §4.3.
    const int32_t base = before.committed[i] + shift + (chain ? a + before.chain_step : 0);
    const int32_t slot = before.req_slot[i];
    for (int32_t j = 0; j < per; ++j) {
      const size_t r = i * size_t(per) + size_t(j);
      const int32_t pos = base + j;
      want.positions[r] = pos;
      want.row_len[r] = pos + 1;
      want.row_topk_len[r] = std::min(pos + 1, before.topk);
      want.row_req[r] = b;
      want.row_page[r] = slot;
      want.write_slot[r] =
          before.page_table[size_t(slot * before.width + pos / kPageSize)] * kPageSize +
          pos % kPageSize;
      want.ks[r] = want.ke[r] = 0;
    }
    want.req_kv_len[i] = base + per;
    if (before.target == StepCommitTarget::kVerify) {
      // The verify's first token is the previous step's y.
      want.tokens[i * size_t(n)] = before.shift_emitted[i * size_t(n) + size_t(shift)];
    } else if (chain) {
      if (!want.hidden_rows.empty()) want.hidden_rows[i] = b * n + a;
    } else {
      // Row j of the draft extend: g_{j+1} where j != a and j < d, else y (SPEC.md §6.1).
      const int32_t y = before.emitted[i * size_t(n) + size_t(a)];
      for (int32_t j = 0; j < n; ++j) {
        const size_t r = i * size_t(n) + size_t(j);
        if (j == a || j == d) want.tokens[r] = y;
        if (j == a && !want.token_rows.empty()) want.token_rows[r] = -1;
      }
      want.sample_row[i] = b * n + a;
    }
  }
  // The folded gather, after the patch (it reads the patched token rows), for every real request.
  for (int32_t b = 0; b < before.requests; ++b) {
    if (chain && !before.draft_tokens.empty()) {
      const int32_t t = before.draft_tokens[size_t(b)];
      if (t >= 0 && t < before.vocab) want.tokens[size_t(b)] = t;
    } else if (!chain && !before.kept_tokens.empty()) {
      for (int32_t j = 0; j < n; ++j) {
        const size_t r = size_t(b) * size_t(n) + size_t(j);
        const int32_t k = want.token_rows[r];
        if (k >= 0 && size_t(k) < before.kept_tokens.size())
          want.tokens[r] = before.kept_tokens[size_t(k)];
      }
    }
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
      {"shift_accepted", &StepCommitCase::shift_accepted},
      {"shift_emitted", &StepCommitCase::shift_emitted},
      {"req_slot", &StepCommitCase::req_slot},
      {"page_table", &StepCommitCase::page_table},
      {"kept_tokens", &StepCommitCase::kept_tokens},
      {"draft_tokens", &StepCommitCase::draft_tokens}};
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
  bool gather = false;
  const auto run = [&](StepCommitTarget target, int32_t s, bool shifted,
                       std::string_view what) -> Status {
    const StepCommitCase before =
        random_step_commit_case(target, requests, d, s, seed + 977 * ++k, shifted, gather);
    StepCommitCase got = before;
    DSA_RETURN_IF_ERROR(op(got.params()));
    return compare_step_commit(before, got)
        .with_context(fmt::format("{}{}{}", what, shifted ? ", shifted" : "",
                                  gather ? ", tokens gathered" : ""));
  };
  for (bool g : {false, true}) {
    gather = g;
    DSA_RETURN_IF_ERROR(run(StepCommitTarget::kVerify, 1, true, "verify"));
    for (bool shifted : {false, true}) {
      DSA_RETURN_IF_ERROR(run(StepCommitTarget::kDraftExtend, 1, shifted, "draft extend"));
      for (int32_t s = 1; s < std::max(d, 2); ++s) {
        DSA_RETURN_IF_ERROR(
            run(StepCommitTarget::kChainDecode, s, shifted, fmt::format("draft decode {}", s)));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
