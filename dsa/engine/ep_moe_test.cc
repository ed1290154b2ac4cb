// Expert parallelism of the MoE over DP ranks on the CPU (docs/multi_gpu.md,
// model/expert_parallel.h): N ranks of the tiny model (4 routed experts) over a LocalDeviceGroup,
// each computing only its share of the experts for every rank's rows. The design is exact, so
//   - at the model: every forward's logits and hidden rows equal the single-rank model's bit for
//     bit, whichever rank runs a request, with ranks of fewer rows and an idle rank;
//   - at the engine: greedy output per request equals the single engine's token for token, d = 0
//     and d = 3, with ranks idle from the start, mid-run and for hundreds of steps;
// and what cannot run is refused, naming the option: ep not dividing the experts, a group of
// another size or rank, ep != dp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "dsa/dist/local_device_group.h"
#include "dsa/engine/dp_engine_group.h"
#include "dsa/engine/dp_test_util.h"
#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

using namespace std::chrono_literals;
using runtime::ForwardMode;
using testing::expect_same_forwards;
using testing::heldout_prompts;
using testing::repo;
using testing::tiny_model;
using testing::tiny_options;

using Models = std::vector<std::unique_ptr<model::DsaModel>>;

// One tiny model per rank, rank r of `group`'s expert-parallel world.
Models ep_models(dist::LocalDeviceGroup& group, model::ModelOptions o) {
  Models out;
  for (int32_t r = 0; r < group.world_size(); ++r) {
    o.ep_rank = r;
    o.ep_size = group.world_size();
    o.ep_group = &group.rank(r);
    auto m = model::DsaModel::load(repo("models/tiny-dsa"), o, kernels::cpu_ops());
    DSA_CHECK(m.ok());
    out.push_back(std::move(*m));
  }
  return out;
}

std::vector<model::DsaModel*> ptrs(const Models& m) {
  std::vector<model::DsaModel*> out;
  for (const auto& p : m) out.push_back(p.get());
  return out;
}

bool same_bytes(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }

// --- The model: bit-identical forwards ---------------------------------------------------------

struct ModelRun {
  // Per request, per forward: its sampled logits row and its hidden rows.
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<std::vector<bf16>>> hidden;
};

constexpr int32_t kDecodeSteps = 3;

// Request i's EXTEND over its prompt, then kDecodeSteps DECODEs of the tokens `next` gives, on
// one model holding `mine` (indices into prompts); every forward at the agreed shape
// (rows_pad / batch_pad over all ranks), an idle rank running it on padding.
Status run_requests(model::DsaModel& m, const std::vector<std::vector<int32_t>>& prompts,
                    const std::vector<size_t>& mine, int32_t rows_pad, int32_t batch_pad,
                    const std::vector<std::vector<int32_t>>& next, ModelRun& run) {
  const int32_t V = int32_t(m.config().vocab_size), D = int32_t(m.config().hidden_size);
  std::vector<int32_t> slots;
  for (size_t i : mine) {
    DSA_ASSIGN_OR_RETURN(int32_t slot, m.pages().open_request());
    DSA_RETURN_IF_ERROR(m.pages().reserve(slot, int32_t(prompts[i].size()) + kDecodeSteps + 1));
    slots.push_back(slot);
  }
  auto record = [&](const model::ForwardOutput& out, size_t j, size_t i, int32_t rows) {
    run.logits[i].emplace_back(out.logits.begin() + long(j) * V,
                               out.logits.begin() + long(j + 1) * V);
    const long first = long(out.row_start[j]) * D;
    run.hidden[i].emplace_back(out.hidden.begin() + first, out.hidden.begin() + first + rows * D);
  };
  ForwardShape ext;
  ext.mode = ForwardMode::kExtend;
  ext.rows_pad = rows_pad;
  std::vector<runtime::RequestInput> reqs;
  std::vector<int32_t> tokens;
  for (size_t j = 0; j < mine.size(); ++j) {
    const int32_t len = int32_t(prompts[mine[j]].size());
    reqs.push_back({slots[j], 0, len, len - 1, 1});
    tokens.insert(tokens.end(), prompts[mine[j]].begin(), prompts[mine[j]].end());
  }
  DSA_ASSIGN_OR_RETURN(runtime::ForwardBatch fb, make_batch(ext, reqs, 1));
  model::ForwardOutput out;
  DSA_RETURN_IF_ERROR(m.forward(fb, tokens, {}, &out));
  for (size_t j = 0; j < mine.size(); ++j) {
    record(out, j, mine[j], int32_t(prompts[mine[j]].size()));
  }
  for (int32_t s = 0; s < kDecodeSteps; ++s) {
    ForwardShape dec;
    dec.mode = ForwardMode::kDecode;
    dec.batch_pad = batch_pad;
    dec.rows_pad = batch_pad;
    dec.rows_per_request = 1;
    dec.samples = batch_pad;
    reqs.clear();
    tokens.clear();
    for (size_t j = 0; j < mine.size(); ++j) {
      reqs.push_back({slots[j], int32_t(prompts[mine[j]].size()) + s, 1, 0, -1});
      tokens.push_back(next[mine[j]][size_t(s)]);
    }
    DSA_ASSIGN_OR_RETURN(fb, make_batch(dec, reqs, 2 + s));
    DSA_RETURN_IF_ERROR(m.forward(fb, tokens, {}, &out));
    for (size_t j = 0; j < mine.size(); ++j) record(out, j, mine[j], 1);
  }
  return ok_status();
}

TEST(ExpertParallelModel, LogitsAndHiddenRowsAreBitIdenticalToOneRank) {
  const auto prompts = heldout_prompts({23, 9, 14, 5});
  const size_t R = prompts.size();
  // One rank holding every request is the reference. The decoded tokens are fixed ones (any
  // tokens do: the runs compare forwards, not sampling).
  auto single = tiny_model(0, int32_t(R));
  const int32_t V = int32_t(single->config().vocab_size);
  std::vector<std::vector<int32_t>> next(R, std::vector<int32_t>(kDecodeSteps, 0));
  for (size_t i = 0; i < R; ++i) {
    for (int32_t s = 0; s < kDecodeSteps; ++s) next[i][size_t(s)] = int32_t(i * 131 + s * 17 + 5);
  }
  std::vector<size_t> all;
  for (size_t i = 0; i < R; ++i) all.push_back(i);
  ModelRun want{std::vector<std::vector<std::vector<float>>>(R),
                std::vector<std::vector<std::vector<bf16>>>(R)};
  int32_t total_rows = 0;
  for (const auto& p : prompts) total_rows += int32_t(p.size());
  const Status ref = run_requests(*single, prompts, all, total_rows, int32_t(R), next, want);
  ASSERT_TRUE(ref.ok()) << ref.message();
  // The logits are real ones: not all equal, finite.
  const auto& l0 = want.logits[0][0];
  ASSERT_NE(*std::min_element(l0.begin(), l0.end()), *std::max_element(l0.begin(), l0.end()));

  struct Case {
    int32_t world;
    std::vector<int32_t> owner;  // per request
  };
  // Uneven ranks (fewer rows pad to rows_pad, fewer requests to batch_pad), and with 4 ranks
  // rank 2 idle in every forward: its padding still joins every collective.
  for (const Case& c : {Case{2, {0, 1, 1, 0}}, Case{2, {1, 1, 1, 0}}, Case{4, {3, 0, 1, 3}}}) {
    SCOPED_TRACE(fmt::format("world {}", c.world));
    auto group = dist::LocalDeviceGroup::create(c.world, 20s);
    ASSERT_TRUE(group.ok());
    // Poisoned workspace: an unwritten element the EP path read (a gathered row, a slot no rank
    // wrote) would be NaN in the outputs, not a silent match.
    model::ModelOptions o = tiny_options(0, int32_t(R), {});
    o.poison_workspace = true;
    const Models models = ep_models(**group, o);
    std::vector<std::vector<size_t>> mine(size_t(c.world));
    std::vector<int32_t> rows(size_t(c.world), 0);
    for (size_t i = 0; i < R; ++i) {
      mine[size_t(c.owner[i])].push_back(i);
      rows[size_t(c.owner[i])] += int32_t(prompts[i].size());
    }
    int32_t rows_pad = 0, batch_pad = 0;
    for (int32_t r = 0; r < c.world; ++r) {
      rows_pad = std::max(rows_pad, rows[size_t(r)]);
      batch_pad = std::max(batch_pad, int32_t(mine[size_t(r)].size()));
    }
    ModelRun got{std::vector<std::vector<std::vector<float>>>(R),
                 std::vector<std::vector<std::vector<bf16>>>(R)};
    std::vector<ModelRun> per_rank(size_t(c.world), got);
    std::vector<Status> status(size_t(c.world));
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < c.world; ++r) {
      threads.emplace_back([&, r] {
        status[size_t(r)] = run_requests(*models[size_t(r)], prompts, mine[size_t(r)], rows_pad,
                                         batch_pad, next, per_rank[size_t(r)]);
      });
    }
    for (auto& t : threads) t.join();
    for (int32_t r = 0; r < c.world; ++r) {
      ASSERT_TRUE(status[size_t(r)].ok()) << "rank " << r << ": " << status[size_t(r)].message();
    }
    for (size_t i = 0; i < R; ++i) {
      const ModelRun& run = per_rank[size_t(c.owner[i])];
      ASSERT_EQ(run.logits[i].size(), size_t(1 + kDecodeSteps));
      for (size_t f = 0; f < run.logits[i].size(); ++f) {
        EXPECT_TRUE(same_bytes(run.logits[i][f].data(), want.logits[i][f].data(),
                               size_t(V) * sizeof(float)))
            << "request " << i << " on rank " << c.owner[i] << ", forward " << f << ": logits";
        ASSERT_EQ(run.hidden[i][f].size(), want.hidden[i][f].size());
        EXPECT_TRUE(same_bytes(run.hidden[i][f].data(), want.hidden[i][f].data(),
                               run.hidden[i][f].size() * sizeof(bf16)))
            << "request " << i << " on rank " << c.owner[i] << ", forward " << f << ": hidden";
      }
    }
  }
}

// --- The engine: token-for-token greedy output -------------------------------------------------

int64_t padded_forwards(const Engine& e) {
  int64_t n = 0;
  for (const ForwardRecord& f : e.forward_trace()) n += f.requests == 0;
  return n;
}

std::vector<std::vector<int32_t>> single_engine(const std::vector<std::vector<int32_t>>& prompts,
                                                const std::vector<int32_t>& max_new, int32_t d,
                                                bool ignore_eos, const EngineOptions& options) {
  auto m = tiny_model(d, int32_t(prompts.size()));
  Engine e(*m, options);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r{prompts[i], max_new[i], {}};
    r.ignore_eos = ignore_eos;
    auto id = e.add_request(r);
    DSA_CHECK(id.ok());
    ids.push_back(*id);
  }
  DSA_CHECK(e.run_to_completion().ok());
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) out.push_back(e.request(id).output);
  return out;
}

struct EngineCase {
  int32_t world, d;
  std::vector<int32_t> lengths, max_new, buckets;
  bool ignore_eos = false;
};

void expect_ep_equals_single(const EngineCase& c) {
  SCOPED_TRACE(fmt::format("ep = dp = {}, d = {}, {} requests", c.world, c.d, c.lengths.size()));
  EngineOptions options;
  options.prefill_chunk = 16;
  options.record_forwards = true;
  const auto prompts = heldout_prompts(c.lengths);
  const auto want = single_engine(prompts, c.max_new, c.d, c.ignore_eos, options);

  auto dev = dist::LocalDeviceGroup::create(c.world, 30s);
  ASSERT_TRUE(dev.ok());
  const Models models = ep_models(**dev, tiny_options(c.d, 4, c.buckets));
  EngineOptions dp_options = options;
  dp_options.check_forwards = true;
  auto group = DpEngineGroup::create(ptrs(models), dp_options, 30s);
  ASSERT_TRUE(group.ok()) << group.status().message();
  std::vector<DpRequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest req{prompts[i], c.max_new[i], {}};
    req.ignore_eos = c.ignore_eos;
    auto id = (*group)->add_request(req);
    ASSERT_TRUE(id.ok()) << id.status().message();
    ids.push_back(*id);
  }
  const Status s = (*group)->run_to_completion();
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<int32_t> per_rank(size_t(c.world), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    ++per_rank[size_t(ids[i].rank)];
    EXPECT_EQ((*group)->engine(ids[i].rank).request(ids[i].id).output, want[i])
        << "request " << i << " on rank " << ids[i].rank;
    EXPECT_EQ((*group)->engine(ids[i].rank).request(ids[i].id).output.size(),
              size_t(c.max_new[i]) * c.ignore_eos + want[i].size() * !c.ignore_eos);
  }
  int64_t padded = 0;
  for (int32_t r = 0; r < c.world; ++r) {
    EXPECT_EQ((*group)->steps()[size_t(r)], (*group)->steps()[0]) << "rank " << r;
    padded += padded_forwards((*group)->engine(r));
    if (per_rank[size_t(r)] == 0) {  // idle from the start: only padded forwards
      EXPECT_EQ(padded_forwards((*group)->engine(r)),
                int64_t((*group)->engine(r).forward_trace().size()));
    }
  }
  EXPECT_GT(padded, 0);  // some rank ran padding beside a busy one, through the collectives
  expect_same_forwards(**group);
}

TEST(ExpertParallelEngine, GreedyOutputEqualsTheSingleEngine) {
  const std::vector<EngineCase> cases = {
      {2, 0, {24, 9, 15, 5, 12}, {9, 3, 6, 11, 2}, {}},
      {2, 3, {24, 9, 15, 5, 12}, {9, 3, 6, 11, 2}, {}},
      {4, 0, {24, 9, 15, 5, 12}, {9, 3, 6, 11, 2}, {2, 4}},
      {4, 3, {21, 7}, {8, 4}, {2, 4}},  // two ranks idle from the start
  };
  for (const EngineCase& c : cases) expect_ep_equals_single(c);
}

// One long request beside an idle rank: the idle rank joins every MoE collective of hundreds of
// padded forwards (d = 0 and d = 3), and the request's tokens are the single engine's.
TEST(ExpertParallelEngine, RankIdleForHundredsOfSteps) {
  expect_ep_equals_single({2, 0, {6}, {200}, {}, true});
  expect_ep_equals_single({2, 3, {6}, {60}, {}, true});
}

// --- Refusals --------------------------------------------------------------------------------

TEST(ExpertParallel, WhatCannotRunIsRefusedNamingTheOption) {
  auto load = [](int32_t rank, int32_t size, dist::DeviceCollective* g) {
    model::ModelOptions o = tiny_options(0, 2, {});
    o.ep_rank = rank;
    o.ep_size = size;
    o.ep_group = g;
    return model::DsaModel::load(repo("models/tiny-dsa"), o, kernels::cpu_ops());
  };
  auto three = dist::LocalDeviceGroup::create(3, 1s);
  ASSERT_TRUE(three.ok());
  auto m = load(0, 3, &(*three)->rank(0));  // 4 experts
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("ep_size = 3: must divide the 4 routed experts"),
            std::string::npos)
      << m.status().message();
  m = load(0, 2, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ep_group is null"), std::string::npos);
  auto two = dist::LocalDeviceGroup::create(2, 1s);
  ASSERT_TRUE(two.ok());
  m = load(0, 2, &(*two)->rank(1));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ep_group is rank 1 of 2, the options say ep_rank = 0"),
            std::string::npos)
      << m.status().message();
  m = load(2, 2, &(*two)->rank(0));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ep_rank = 2"), std::string::npos);
  m = load(0, 0, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ep_size = 0"), std::string::npos);

  // An EP model under a single engine: refused at the first call, not a wait for absent peers.
  {
    auto solo_dev = dist::LocalDeviceGroup::create(2, 1s);
    ASSERT_TRUE(solo_dev.ok());
    const Models ep = ep_models(**solo_dev, tiny_options(0, 2, {}));
    Engine alone(*ep[0]);
    auto id = alone.add_request({{5, 6}, 3, {}});
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find("ep_size = 2 but the engine's DP group has 1 rank"),
              std::string::npos)
        << id.status().message();
  }
  // ep != dp: two EP ranks' models in a group of three, or in the wrong order.
  const Models ep2 = ep_models(**two, tiny_options(0, 2, {}));
  auto plain = tiny_model(0, 2);
  auto g = DpEngineGroup::create({ep2[0].get(), ep2[1].get(), plain.get()}, {}, 1s);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("ep_size"), std::string::npos) << g.status().message();
  g = DpEngineGroup::create({ep2[0].get()}, {}, 1s);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("ep_size = 2: expert parallelism needs ep_size == the dp "
                                      "size 1"),
            std::string::npos)
      << g.status().message();
  g = DpEngineGroup::create({ep2[1].get(), ep2[0].get()}, {}, 1s);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("models[0] has ep_rank = 1: must be its dp rank 0"),
            std::string::npos)
      << g.status().message();
}

}  // namespace
}  // namespace dsa::engine
