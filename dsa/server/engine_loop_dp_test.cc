// The engine thread over DP ranks (--dp-size N, docs/multi_gpu.md), in both of its forms: the
// ranks of one process (EngineLoop::create over a DpEngineGroup), and the front of rank processes
// (EngineLoop::create_front, the other ranks' RankFollower loops on threads here, over a LocalGroup
// standing in for the process group). Requests submitted concurrently, before the loop starts and
// from client threads while it runs, are placed by load on N ranks, and each request's greedy
// text, streamed or not, equals what one engine alone (dp 1) produces; every rank takes every step
// (the per-rank gauges agree); the merged totals and the per-rank shares are in /metrics; every
// rank's pages come back. For the front: a client that goes away aborts its request on its rank,
// the shutdown's deadline aborts every rank's requests and stops the followers, and a rank that
// never joins fails the requests with the group's error instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "dsa/dist/local_group.h"
#include "dsa/engine/engine_test_util.h"
#include "dsa/server/engine_loop.h"
#include "dsa/server/rank_follower.h"

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

// The two forms of the loop over `world` ranks of the tiny model.
enum class Form { kThreads, kFront };

struct Served {
  std::vector<std::unique_ptr<model::DsaModel>> models;
  std::vector<int32_t> free_before;  // each rank's free pages before any request
  std::unique_ptr<dist::LocalGroup> group;
  std::unique_ptr<EngineLoop> loop;
  std::vector<std::unique_ptr<RankFollower>> followers;
  std::vector<Status> follower_status;
  std::vector<std::thread> threads;

  // Ends the loop (after `deadline`) and the followers; their statuses are then in follower_status.
  void stop(std::chrono::steady_clock::time_point deadline) {
    loop->shutdown(deadline);
    loop->join();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
  ~Served() {
    if (loop) stop(std::chrono::steady_clock::now());
  }
};

// `followers_started`: how many of the front's other ranks run their loop (all, unless a test
// leaves one out); `timeout`: the group's watchdog.
std::unique_ptr<Served> serve(Form form, int32_t world, int32_t d, ServerMetrics* metrics,
                              const engine::EngineOptions& eo, int32_t followers_started = -1,
                              std::chrono::milliseconds timeout = 60s) {
  auto s = std::make_unique<Served>();
  std::vector<model::DsaModel*> ranks;
  for (int32_t r = 0; r < world; ++r) {
    s->models.push_back(tiny_model(d, 4));
    ranks.push_back(s->models.back().get());
    s->free_before.push_back(s->models.back()->pages().num_free_pages());
  }
  const EngineLoopOptions limits{.max_running = 4 * world, .max_queued = 16, .num_draft_tokens = d};
  if (form == Form::kThreads) {
    auto loop = EngineLoop::create(ranks, eo, limits, metrics);
    EXPECT_TRUE(loop.ok()) << loop.status().to_string();
    if (loop.ok()) s->loop = std::move(*loop);
    return s;
  }
  auto group = dist::LocalGroup::create(world, timeout);
  EXPECT_TRUE(group.ok());
  s->group = std::move(group.value());
  auto loop = EngineLoop::create_front(*ranks[0], eo, limits, metrics, s->group->rank(0));
  EXPECT_TRUE(loop.ok()) << loop.status().to_string();
  if (loop.ok()) s->loop = std::move(*loop);
  s->follower_status.assign(size_t(world), ok_status());
  const int32_t started = followers_started < 0 ? world - 1 : followers_started;
  for (int32_t r = 1; r <= started; ++r) {
    s->followers.push_back(
        std::make_unique<RankFollower>(*ranks[size_t(r)], eo, s->group->rank(r)));
    RankFollower* f = s->followers.back().get();
    Served* self = s.get();
    s->threads.emplace_back([self, f, r] { self->follower_status[size_t(r)] = f->run(); });
  }
  return s;
}

void concurrent_requests_match_dp1(Form form, int32_t world, int32_t d) {
  SCOPED_TRACE(::testing::Message() << "dp " << world << ", d = " << d
                                    << (form == Form::kFront ? ", rank processes" : ", threads"));
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
  ServerMetrics metrics(d);
  std::unique_ptr<Served> served = serve(form, world, d, &metrics, eo);
  ASSERT_NE(served->loop, nullptr);
  EngineLoop* loop = served->loop.get();
  ASSERT_EQ(loop->world_size(), world);

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
    auto c = loop->submit(request(i), /*stream=*/i % 2 == 0, "pre" + std::to_string(i));
    ASSERT_TRUE(c.ok());
    channels[i] = *c;
  }
  loop->start();
  // The rest from client threads while the ranks run: they join at the next step.
  std::vector<std::thread> clients;
  for (size_t i = 3; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * (i - 2)));
      auto c = loop->submit(request(i), i % 2 == 0, "live" + std::to_string(i));
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
  EXPECT_EQ(loop->in_flight(), 0);
  // The gauges and pools are read once the engine thread (and the followers) ended.
  served->stop(std::chrono::steady_clock::now());
  for (const Status& st : served->follower_status) EXPECT_TRUE(st.ok()) << st.to_string();
  for (int32_t r = 0; r < world; ++r) {
    EXPECT_EQ(served->models[size_t(r)]->pages().num_free_pages(), served->free_before[size_t(r)])
        << "rank " << r;
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
  concurrent_requests_match_dp1(Form::kThreads, 2, 2);
}

TEST(EngineLoopDp, ThreeRanksGiveTheSingleEnginesTokens) {
  concurrent_requests_match_dp1(Form::kThreads, 3, 0);
}

TEST(EngineLoopRankProcesses, TwoRanksGiveTheSingleEnginesTokensWithMtp) {
  concurrent_requests_match_dp1(Form::kFront, 2, 2);
}

TEST(EngineLoopRankProcesses, ThreeRanksGiveTheSingleEnginesTokens) {
  concurrent_requests_match_dp1(Form::kFront, 3, 0);
}

engine::GenerationRequest long_request(const std::vector<int32_t>& prompt) {
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.max_new_tokens = 200;
  r.ignore_eos = true;
  return r;
}

// Waits until the channel's request has streamed some text (it is then running on its rank).
bool wait_for_text(RequestChannel& c, std::vector<RequestEvent>& seen) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    for (RequestEvent& e : c.wait(50ms)) seen.push_back(std::move(e));
    for (const RequestEvent& e : seen) {
      if (!e.text.empty()) return true;
    }
  }
  return false;
}

TEST(EngineLoopRankProcesses, AClientThatGoesAwayAbortsItsRequestOnItsRank) {
  engine::EngineOptions eo;
  eo.tokenizer = &tokenizer();
  ServerMetrics metrics(0);
  std::unique_ptr<Served> served = serve(Form::kFront, 2, 0, &metrics, eo);
  ASSERT_NE(served->loop, nullptr);
  EngineLoop* loop = served->loop.get();
  const auto prompts = heldout_prompts({12, 12});
  // Two at once from an idle start: one lands on each rank; the second on rank 1.
  auto a = loop->submit(long_request(prompts[0]), true, "a");
  auto b = loop->submit(long_request(prompts[1]), true, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  loop->start();
  std::vector<RequestEvent> seen_a, seen_b;
  ASSERT_TRUE(wait_for_text(**b, seen_b)) << "rank 1's request streamed nothing";
  (*b)->cancel();
  auto [rest_b, finished_b] = collect(**b);
  EXPECT_EQ(finished_b.finish, engine::FinishReason::kAborted);
  EXPECT_LT(finished_b.completion_tokens, 200);
  (*a)->cancel();
  auto [rest_a, finished_a] = collect(**a);
  EXPECT_EQ(finished_a.finish, engine::FinishReason::kAborted);
  served->stop(std::chrono::steady_clock::now() + 10s);
  for (const Status& st : served->follower_status) EXPECT_TRUE(st.ok()) << st.to_string();
  const std::map<int, double> placed = per_rank(metrics.serialize(), "dsa:dp_rank_requests_placed");
  EXPECT_EQ(placed.at(0), 1);
  EXPECT_EQ(placed.at(1), 1);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(served->models[r]->pages().num_free_pages(), served->free_before[r]) << "rank " << r;
  }
}

TEST(EngineLoopRankProcesses, TheShutdownDeadlineAbortsEveryRanksRequests) {
  engine::EngineOptions eo;
  eo.tokenizer = &tokenizer();
  std::unique_ptr<Served> served = serve(Form::kFront, 3, 2, nullptr, eo);
  ASSERT_NE(served->loop, nullptr);
  EngineLoop* loop = served->loop.get();
  const auto prompts = heldout_prompts({10, 11, 12});
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto c = loop->submit(long_request(prompts[i]), true, "r" + std::to_string(i));
    ASSERT_TRUE(c.ok());
    channels.push_back(*c);
  }
  loop->start();
  std::vector<RequestEvent> seen;
  ASSERT_TRUE(wait_for_text(*channels[2], seen));
  // Past its deadline at once: every rank's requests are aborted, then the followers stop.
  served->stop(std::chrono::steady_clock::now());
  for (auto& c : channels) {
    auto [rest, finished] = collect(*c);
    EXPECT_EQ(finished.finish, engine::FinishReason::kAborted);
  }
  for (const Status& st : served->follower_status) EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_FALSE(loop->failed());
  // A stopped server takes nothing more.
  EXPECT_FALSE(loop->submit(long_request(prompts[0]), false, "late").ok());
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(served->models[r]->pages().num_free_pages(), served->free_before[r]) << "rank " << r;
  }
}

TEST(EngineLoopRankProcesses, ARankThatNeverJoinsFailsTheRequestsInsteadOfHanging) {
  engine::EngineOptions eo;
  eo.tokenizer = &tokenizer();
  // Rank 2's loop never starts; the group's watchdog is 1 s.
  std::unique_ptr<Served> served = serve(Form::kFront, 3, 0, nullptr, eo, 1, 1s);
  ASSERT_NE(served->loop, nullptr);
  EngineLoop* loop = served->loop.get();
  auto c = loop->submit(long_request(heldout_prompts({9})[0]), false, "x");
  ASSERT_TRUE(c.ok());
  loop->start();
  // Submitted while the front waits in the exchange that fails: answered too, not left queued.
  std::this_thread::sleep_for(200ms);
  auto late = loop->submit(long_request(heldout_prompts({7})[0]), true, "late");
  ASSERT_TRUE(late.ok());
  auto [rest, finished] = collect(**c);
  EXPECT_EQ(finished.finish, engine::FinishReason::kError);
  auto [late_rest, late_finished] = collect(**late);
  EXPECT_EQ(late_finished.finish, engine::FinishReason::kError);
  EXPECT_EQ(loop->in_flight(), 0);
  EXPECT_TRUE(loop->failed());
  const Status why = loop->failure();
  EXPECT_FALSE(why.ok());
  EXPECT_NE(why.message().find("[2] missing"), std::string::npos) << why.to_string();
  EXPECT_EQ(finished.error.message(), why.message());
  // The loop ended on its own; a new request is refused (the server then stops).
  EXPECT_FALSE(loop->submit(long_request(heldout_prompts({9})[0]), false, "y").ok());
  served->stop(std::chrono::steady_clock::now());
  EXPECT_FALSE(served->follower_status[1].ok()) << "rank 1 should see the broken group";
}

TEST(EngineLoopRankProcesses, TheFrontMustBeRankZero) {
  auto group = dist::LocalGroup::create(2, 1s);
  ASSERT_TRUE(group.ok());
  auto m = tiny_model(0, 4);
  auto loop = EngineLoop::create_front(*m, {}, {.max_running = 8}, nullptr, (*group)->rank(1));
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loop.status().message().find("rank 0"), std::string::npos) << loop.status().message();
}

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
