// The engine thread over DP ranks (--dp-size N on the CPU, docs/multi_gpu.md): requests submitted
// concurrently, before the loop starts and from client threads while it runs, are placed by load
// on N ranks, and each request's greedy text, streamed or not, equals what one engine alone (dp 1)
// produces; every rank takes every step (the per-rank gauges agree); the merged totals and the
// per-rank shares are in /metrics; every rank's pages come back.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "dsa/engine/engine_test_util.h"
#include "dsa/server/engine_loop.h"

namespace dsa::server {
namespace {

using namespace std::chrono_literals;
using engine::testing::heldout_prompts;
using engine::testing::tiny_model;
using engine::testing::tokenizer;

// Reads a channel until its request finishes (60 s at most); the joined deltas and the finish.
std::pair<std::string, RequestEvent> collect(RequestChannel& c) {
  std::string streamed;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    for (RequestEvent& e : c.wait(100ms)) {
      streamed += e.text;
      if (e.kind == RequestEvent::Kind::kFinished) return {streamed, std::move(e)};
    }
  }
  ADD_FAILURE() << "the request did not finish within 60 s";
  return {streamed, RequestEvent{}};
}

std::string text_of(const std::vector<int32_t>& ids) {
  model::TextStream t(&tokenizer());
  EXPECT_TRUE(t.push(ids).ok());
  t.finish();
  return t.text();
}

// gauge{dp_rank="r"} for every rank found in the /metrics text.
std::map<int, double> per_rank(const std::string& metrics, const std::string& gauge) {
  std::map<int, double> out;
  const std::regex line(gauge + "\\{dp_rank=\"(\\d+)\"\\} ([0-9.e+]+)");
  for (auto it = std::sregex_iterator(metrics.begin(), metrics.end(), line);
       it != std::sregex_iterator(); ++it) {
    out[std::stoi((*it)[1])] = std::stod((*it)[2]);
  }
  return out;
}

void concurrent_requests_match_dp1(int32_t world, int32_t d) {
  SCOPED_TRACE(::testing::Message() << "dp " << world << ", d = " << d);
  const std::vector<std::vector<int32_t>> prompts = heldout_prompts({20, 9, 14, 5, 11, 17});
  const std::vector<int32_t> max_new = {16, 24, 8, 20, 12, 10};
  engine::EngineOptions eo;
  eo.tokenizer = &tokenizer();
  std::vector<std::string> expected;
  {
    auto solo = tiny_model(d, 4);
    auto want = engine::testing::generate(*solo, prompts, max_new, {}, eo);
    for (const auto& ids : want.outputs) expected.push_back(text_of(ids));
  }
  std::vector<std::unique_ptr<model::DsaModel>> models;
  std::vector<model::DsaModel*> ranks;
  std::vector<int32_t> free_before;
  for (int32_t r = 0; r < world; ++r) {
    models.push_back(tiny_model(d, 4));
    ranks.push_back(models.back().get());
    free_before.push_back(models.back()->pages().num_free_pages());
  }
  ServerMetrics metrics(d);
  auto loop = EngineLoop::create(
      ranks, eo, {.max_running = 4 * world, .max_queued = 16, .num_draft_tokens = d}, &metrics);
  ASSERT_TRUE(loop.ok()) << loop.status().to_string();
  ASSERT_EQ((*loop)->world_size(), world);

  auto request = [&](size_t i) {
    engine::GenerationRequest r;
    r.prompt = prompts[i];
    r.max_new_tokens = max_new[i];
    r.sampling.seed = i;  // greedy either way; as generate() seeds them
    return r;
  };
  std::vector<std::shared_ptr<RequestChannel>> channels(prompts.size());
  // Three before the loop starts: admitted together, they spread over the ranks by load.
  for (size_t i = 0; i < 3; ++i) {
    auto c = (*loop)->submit(request(i), /*stream=*/i % 2 == 0, "pre" + std::to_string(i));
    ASSERT_TRUE(c.ok());
    channels[i] = *c;
  }
  (*loop)->start();
  // The rest from client threads while the ranks run: they join at the next step.
  std::vector<std::thread> clients;
  for (size_t i = 3; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * (i - 2)));
      auto c = (*loop)->submit(request(i), i % 2 == 0, "live" + std::to_string(i));
      if (c.ok()) channels[i] = *c;
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_NE(channels[i], nullptr) << "request " << i << " was refused";
    auto [streamed, finished] = collect(*channels[i]);
    EXPECT_NE(finished.finish, engine::FinishReason::kError) << finished.error.to_string();
    EXPECT_EQ(finished.full_text, expected[i]) << "request " << i;
    if (channels[i]->stream()) EXPECT_EQ(streamed, finished.full_text) << "request " << i;
  }
  EXPECT_EQ((*loop)->in_flight(), 0);
  (*loop)->shutdown(std::chrono::steady_clock::now());
  (*loop)->join();  // the gauges and pools are read once the engine thread ended
  for (int32_t r = 0; r < world; ++r) {
    EXPECT_EQ(models[size_t(r)]->pages().num_free_pages(), free_before[size_t(r)]) << "rank " << r;
  }
  const std::string text = metrics.serialize();
  const std::map<int, double> steps = per_rank(text, "dsa:dp_rank_steps");
  const std::map<int, double> placed = per_rank(text, "dsa:dp_rank_requests_placed");
  ASSERT_EQ(steps.size(), size_t(world)) << text;
  double total_placed = 0;
  for (int32_t r = 0; r < world; ++r) {
    EXPECT_EQ(steps.at(r), steps.at(0)) << "rank " << r << " took other steps: " << text;
    total_placed += placed.at(r);
  }
  EXPECT_GT(steps.at(0), 0);
  EXPECT_EQ(total_placed, double(prompts.size()));
  EXPECT_GT(placed.at(1), 0) << "nothing was placed on rank 1: " << text;
  EXPECT_NE(text.find("dsa:num_requests_total{finish_reason=\"length\"}"), std::string::npos);
}

TEST(EngineLoopDp, TwoRanksGiveTheSingleEnginesTokensWithMtp) {
  concurrent_requests_match_dp1(2, 2);
}

TEST(EngineLoopDp, ThreeRanksGiveTheSingleEnginesTokens) { concurrent_requests_match_dp1(3, 0); }

TEST(EngineLoopDp, DifferentModelsAreRefused) {
  auto a = tiny_model(0, 4);
  auto b = tiny_model(2, 4);  // another d: the ranks could not agree on step plans
  auto loop = EngineLoop::create({a.get(), b.get()}, {}, {.max_running = 8}, nullptr);
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loop.status().message().find("models[1] differs"), std::string::npos)
      << loop.status().message();
  EXPECT_FALSE(EngineLoop::create({}, {}, {}, nullptr).ok());
}

}  // namespace
}  // namespace dsa::server
