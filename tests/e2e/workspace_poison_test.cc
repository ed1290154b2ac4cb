// The workspace audit's proof on the CPU backend (runtime/workspace.h, issue 15): the tiny model
// with its uninitialised takes poisoned (0xFF: NaN in bf16 and fp32, -1 in int32), and every
// metadata region past the part a forward uses poisoned too (runtime/metadata_mirror.h: the
// upload copies that part only; a model whose upload left one used row out fails here), and without
// must agree bit for bit — hidden states of every row (padded ones included), logits of every
// sample, generated tokens — in every forward mode: EXTEND (ragged and paged sub-batch, a second
// chunk), DECODE, TARGET_VERIFY, MTP DRAFT_EXTEND and MTP DECODE at d = 3, IDLE, with bucket-padded
// requests. A take switched to uninitialised whose consumer relied on zeros makes the poisoned run
// differ (checked on the LM head's sample gather, which skips padded requests). And the count of
// zero-filled takes per forward: each is a memset node of a captured CUDA graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/testing/random.h"
#include "tests/e2e/model_compare.h"

namespace dsa::e2e {
namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

constexpr int32_t kMaxRequests = 4;
constexpr int32_t kMaxContext = 512;
// Zero-filled takes one forward may make: none since the LM head's gather of sampled rows zeroes
// the rows it skips itself (row_copy's zero_skipped); each would be a memset node of every graph.
constexpr int64_t kMaxZeroFillsPerForward = 0;

int32_t iterations(int32_t fallback) {
  const char* e = std::getenv("DSA_POISON_ITERS");
  return e ? std::max(1, std::atoi(e)) : fallback;
}

struct Pair {
  std::unique_ptr<model::DsaModel> plain, poisoned;
};

Pair load_pair(int32_t d) {
  LoadOptions o{.d = d, .max_requests = kMaxRequests, .max_context = kMaxContext, .buckets = true};
  Pair p;
  p.plain = load_tiny(kernels::cpu_ops(), o);
  o.poison = true;
  p.poisoned = load_tiny(kernels::cpu_ops(), o);
  return p;
}

// A request slot opened in both models' page managers (kept in lockstep).
int32_t open_both(Pair& p) {
  auto a = p.plain->pages().open_request();
  auto b = p.poisoned->pages().open_request();
  EXPECT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b) << "page managers out of lockstep";
  return *a;
}

void reserve_both(Pair& p, int32_t slot, int32_t len) {
  ASSERT_TRUE(p.plain->pages().reserve(slot, len).ok());
  ASSERT_TRUE(p.poisoned->pages().reserve(slot, len).ok());
}

struct Tally {
  int64_t forwards = 0, rows = 0, padded_rows = 0, samples = 0, padded_samples = 0;
};

// The same forward on both models: outputs equal bit for bit; logits of padded samples zero.
void forward_both(Pair& p, const runtime::ForwardBatch& b, const std::vector<int32_t>& tokens,
                  const std::vector<bf16>& hidden, const std::string& what, Tally& t) {
  model::ForwardOutput a, z;
  Status s = p.plain->forward(b, tokens, hidden, &a);
  ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
  s = p.poisoned->forward(b, tokens, hidden, &z);
  ASSERT_TRUE(s.ok()) << what << " (poisoned): " << s.to_string();
  EXPECT_EQ(a.header, z.header) << what;
  EXPECT_EQ(a.sample_row, z.sample_row) << what;
  ASSERT_EQ(a.hidden.size(), z.hidden.size()) << what;
  ASSERT_EQ(a.logits.size(), z.logits.size()) << what;
  EXPECT_EQ(std::memcmp(a.hidden.data(), z.hidden.data(), a.hidden.size() * sizeof(bf16)), 0)
      << what << ": hidden states differ with the workspace poisoned";
  EXPECT_EQ(std::memcmp(a.logits.data(), z.logits.data(), a.logits.size() * sizeof(float)), 0)
      << what << ": logits differ with the workspace poisoned";
  const size_t V = size_t(p.plain->config().vocab_size);
  for (size_t i = 0; i < z.sample_row.size(); ++i) {
    if (z.sample_row[i] >= 0) continue;
    ++t.padded_samples;
    const float* row = z.logits.data() + i * V;
    EXPECT_TRUE(std::all_of(row, row + V, [](float v) { return v == 0.f; }))
        << what << ": sample " << i << " (sample_row -1) has non-zero logits";
  }
  ++t.forwards;
  t.rows += a.header.rows_pad;
  t.padded_rows += a.header.rows_pad - a.header.rows;
  t.samples += int64_t(a.sample_row.size());
}

struct Live {
  int32_t slot, cached;
};

// Prefill: one EXTEND forward of a long request (ragged indexer path), a short one (paged
// sub-batch: <= d + 1 rows) and a one-token one, then a second chunk of the long one.
std::vector<Live> prefill(Pair& p, int32_t d, testing::Rng& rng, Tally& t) {
  const int32_t V = int32_t(p.plain->config().vocab_size);
  const std::vector<int32_t> lens = {150, std::min(d + 1, 3), 1};
  std::vector<Live> live;
  runtime::ForwardBatch b;
  b.mode = ForwardMode::kExtend;
  std::vector<int32_t> tokens;
  for (int32_t n : lens) {
    const int32_t slot = open_both(p);
    reserve_both(p, slot, n);
    b.requests.push_back({slot, 0, n, n - 1, 1});
    for (int32_t i = 0; i < n; ++i) tokens.push_back(int32_t(rng.randint(0, V - 1)));
    live.push_back({slot, n});
  }
  forward_both(p, b, tokens, {}, "EXTEND prefill", t);
  // The long request's next chunk, every row sampled, with the one-token request's next row.
  b.requests = {{live[0].slot, live[0].cached, 70, 0, 70}, {live[2].slot, live[2].cached, 1, 0, 1}};
  reserve_both(p, live[0].slot, live[0].cached + 70);
  reserve_both(p, live[2].slot, live[2].cached + 1);
  tokens.assign(71, 0);
  for (int32_t& tok : tokens) tok = int32_t(rng.randint(0, V - 1));
  forward_both(p, b, tokens, {}, "EXTEND second chunk", t);
  live[0].cached += 70;
  live[2].cached += 1;
  return live;
}

// One random uniform forward (or IDLE) over a random subset of the live requests, padded to the
// bucket, as the engine runs them.
void uniform_step(Pair& p, int32_t d, testing::Rng& rng, std::vector<Live>& live, int64_t id,
                  Tally& t) {
  const int32_t V = int32_t(p.plain->config().vocab_size);
  const int32_t D = int32_t(p.plain->config().hidden_size);
  if (int32_t(live.size()) < kMaxRequests && rng.randint(0, 3) == 0) {
    const int32_t slot = open_both(p);
    live.push_back({slot, int32_t(rng.randint(0, 4)) * 64 + int32_t(rng.randint(-2, 2)) + 2});
  }
  ModelKind kind = ModelKind::kTarget;
  ForwardMode mode = d == 0 ? ForwardMode::kDecode : ForwardMode::kTargetVerify;
  if (d > 0) {
    const int64_t pick = rng.randint(0, 2);
    if (pick == 1) kind = ModelKind::kMtp, mode = ForwardMode::kDraftExtend;
    if (pick == 2 && d > 1) kind = ModelKind::kMtp, mode = ForwardMode::kDecode;
  }
  const int32_t n = mode == ForwardMode::kDecode ? 1 : d + 1;
  std::vector<size_t> chosen;
  for (size_t i = 0; i < live.size(); ++i) {
    if (rng.randint(0, 3) != 0) chosen.push_back(i);
  }
  std::shuffle(chosen.begin(), chosen.end(), rng.engine());
  const bool idle = chosen.empty();
  runtime::ForwardBatch b;
  b.model = kind;
  b.mode = idle ? ForwardMode::kIdle : mode;
  b.idle_rows_per_request = n;
  b.forward_id = id;
  for (size_t i : chosen) {
    reserve_both(p, live[i].slot, live[i].cached + n);
    const int32_t first = mode == ForwardMode::kDraftExtend ? int32_t(rng.randint(0, n - 1)) : 0;
    b.requests.push_back({live[i].slot, live[i].cached, n, first, -1});
  }
  b.batch_pad = p.plain->batch_pad_for(std::max<int32_t>(1, int32_t(chosen.size())));
  const int32_t rows = b.batch_pad * n, real_rows = int32_t(chosen.size()) * n;
  std::vector<int32_t> tokens(size_t(rows), 0);
  for (int32_t r = 0; r < real_rows; ++r) tokens[size_t(r)] = int32_t(rng.randint(0, V - 1));
  std::vector<bf16> hidden;
  if (kind == ModelKind::kMtp) hidden = rng.bf16_vector(size_t(rows) * D);
  const std::string what = std::string(runtime::model_name(kind)) + " " +
                           std::string(runtime::mode_name(b.mode)) + " B " +
                           std::to_string(chosen.size()) + " B_pad " + std::to_string(b.batch_pad) +
                           " forward " + std::to_string(id);
  forward_both(p, b, tokens, hidden, what, t);
  for (size_t i : chosen) live[i].cached += int32_t(rng.randint(0, n));
  for (Live& r : live) {
    if (r.cached + 2 * (d + 1) + 8 > kMaxContext) r.cached = int32_t(rng.randint(0, 200));
  }
}

void every_mode(int32_t d, int32_t steps) {
  Pair p = load_pair(d);
  ASSERT_TRUE(p.plain && p.poisoned);
  testing::Rng rng(testing::test_seed() + uint64_t(d));
  Tally t;
  std::vector<Live> live = prefill(p, d, rng, t);
  for (int32_t i = 0; i < steps && !::testing::Test::HasFailure(); ++i) {
    uniform_step(p, d, rng, live, i, t);
  }
  if (::testing::Test::HasFailure()) return;
  std::printf(
      "d = %d: %lld forwards bit-identical with the workspace poisoned: %lld rows (%lld padded), "
      "%lld samples (%lld padded, logits zero)\n",
      d, (long long)t.forwards, (long long)t.rows, (long long)t.padded_rows, (long long)t.samples,
      (long long)t.padded_samples);
  EXPECT_GT(t.padded_rows, 0);
  EXPECT_GT(t.padded_samples, 0);
}

TEST(WorkspacePoison, DecodeAndExtendAreBitIdentical) { every_mode(0, iterations(24)); }

TEST(WorkspacePoison, SpeculativeFormsAreBitIdentical) { every_mode(3, iterations(36)); }

// Greedy generation through the engine at d = 3 (verify, draft-extend and the MTP draft chain,
// acceptance on the host): the same tokens with the workspace poisoned.
TEST(WorkspacePoison, SpeculativeGenerationEmitsTheSameTokens) {
  Pair p = load_pair(3);
  ASSERT_TRUE(p.plain && p.poisoned);
  // More prompts than B_max (requests enter and leave), one past a page and K.
  std::vector<std::vector<int32_t>> prompts;
  testing::Rng rng(testing::test_seed());
  for (int32_t len : {3, 9, 17, 40, 130}) {
    std::vector<int32_t> prompt = {0};
    for (int32_t i = 1; i < len; ++i) prompt.push_back(int32_t(rng.randint(2, 6143)));
    prompts.push_back(prompt);
  }
  const auto want = generate(*p.plain, prompts, 10);
  const auto got = generate(*p.poisoned, prompts, 10);
  ASSERT_EQ(want.size(), prompts.size());
  EXPECT_EQ(want, got);
  size_t tokens = 0;
  for (const auto& o : got) tokens += o.size();
  std::printf("d = 3 generation: %zu prompts, %zu tokens identical with the workspace poisoned\n",
              prompts.size(), tokens);
}

// Takes per forward and how many of them zero-fill. Before the audit every take did: 120 per
// target forward of the tiny model (any mode), 37 per MTP forward; after it, 1 each (and the
// latent rows and the final norm writing in place took 5 and 2 takes away: 115 and 35; the norms
// that gather their rows took the embedding's take away, and the LM head's gather stopped
// zero-filling: none zero-filled now).
struct Delta {
  int64_t zeroed, uninit;
};
Delta counted(model::DsaModel& m, const runtime::ForwardBatch& b,
              const std::vector<int32_t>& tokens, const std::vector<bf16>& hidden) {
  const runtime::Workspace::Counts before = m.workspace_counts();
  model::ForwardOutput out;
  Status s = m.forward(b, tokens, hidden, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  const runtime::Workspace::Counts& after = m.workspace_counts();
  return {after.zeroed - before.zeroed, after.uninit - before.uninit};
}

void report(const char* what, const Delta& c) {
  std::printf("%s: %lld workspace takes, %lld zero-filled, %lld uninitialised\n", what,
              (long long)(c.zeroed + c.uninit), (long long)c.zeroed, (long long)c.uninit);
  EXPECT_LE(c.zeroed, kMaxZeroFillsPerForward) << what;
}

TEST(WorkspaceFills, NoZeroFillPerForward) {
  for (int32_t d : {0, 3}) {
    auto m = load_tiny(
        kernels::cpu_ops(),
        {.d = d, .max_requests = kMaxRequests, .max_context = kMaxContext, .buckets = true});
    ASSERT_TRUE(m);
    auto slot = m->pages().open_request();
    ASSERT_TRUE(slot.ok());
    ASSERT_TRUE(m->pages().reserve(*slot, 40).ok());
    runtime::ForwardBatch b;
    b.mode = ForwardMode::kExtend;
    b.requests = {{*slot, 0, 20, 19, 1}};
    report(d == 0 ? "EXTEND of 20 rows" : "EXTEND of 20 rows (d = 3)",
           counted(*m, b, std::vector<int32_t>(20, 7), {}));
    const int32_t n = d + 1;
    b.mode = d == 0 ? ForwardMode::kDecode : ForwardMode::kTargetVerify;
    b.batch_pad = 2;  // one padded request
    b.requests = {{*slot, 20, n, 0, -1}};
    const std::vector<int32_t> tokens(size_t(2 * n), 9);
    report(d == 0 ? "DECODE B 1 B_pad 2" : "TARGET_VERIFY d = 3, B 1 B_pad 2",
           counted(*m, b, tokens, {}));
    if (d == 0) continue;
    b.model = ModelKind::kMtp;
    b.mode = ForwardMode::kDraftExtend;
    const std::vector<bf16> hidden(size_t(2 * n) * size_t(m->config().hidden_size), bf16{});
    report("MTP DRAFT_EXTEND d = 3, B 1 B_pad 2", counted(*m, b, tokens, hidden));
    b.mode = ForwardMode::kDecode;
    b.requests = {{*slot, 21, 1, 0, -1}};
    const std::vector<bf16> hidden1(size_t(2) * size_t(m->config().hidden_size), bf16{});
    report("MTP DECODE B 1 B_pad 2", counted(*m, b, std::vector<int32_t>(2, 9), hidden1));
  }
}

}  // namespace
}  // namespace dsa::e2e
