// The engine thread with the shipped tiny model: submitted requests stream their text in deltas
// that add up to the whole text (equal to the engine run alone), an abort frees the request's pages
// and leaves the others unchanged, the queue is bounded, the shutdown aborts at its deadline.
#include "dsa/server/engine_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "dsa/engine/engine_test_util.h"

namespace dsa::server {
namespace {

using namespace std::chrono_literals;
using engine::testing::heldout_prompts;
using engine::testing::tiny_model;
using engine::testing::tokenizer;

struct Collected {
  std::string streamed;  // the deltas, joined
  int32_t delta_tokens = 0;
  RequestEvent finished;
};

// Reads a channel until its request finishes (or 60 s pass: a stuck loop fails the test).
Collected collect(RequestChannel& c) {
  Collected out;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    for (RequestEvent& e : c.wait(100ms)) {
      out.streamed += e.text;
      if (e.kind == RequestEvent::Kind::kFinished) {
        out.finished = std::move(e);
        return out;
      }
      out.delta_tokens += e.num_tokens;
    }
  }
  ADD_FAILURE() << "the request did not finish within 60 s";
  return out;
}

engine::EngineOptions with_tokenizer() {
  engine::EngineOptions o;
  o.tokenizer = &tokenizer();
  return o;
}

engine::GenerationRequest request(std::vector<int32_t> prompt, int32_t max_new) {
  engine::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  return r;
}

TEST(EngineLoop, StreamsDeltasThatAddUpToTheText) {
  auto prompts = heldout_prompts({20, 9});
  auto m = tiny_model(2, 4);
  auto expected = engine::testing::generate(*m, prompts, {24, 24}, {}, with_tokenizer());
  ServerMetrics metrics(2);
  EngineLoop loop(*m, with_tokenizer(), {.max_running = 4, .max_queued = 4, .num_draft_tokens = 2},
                  &metrics);
  loop.start();
  auto streamed = loop.submit(request(prompts[0], 24), /*stream=*/true, "a");
  auto whole = loop.submit(request(prompts[1], 24), /*stream=*/false, "b");
  ASSERT_TRUE(streamed.ok() && whole.ok());
  Collected a = collect(**streamed);
  Collected b = collect(**whole);
  EXPECT_EQ(a.finished.finish, engine::FinishReason::kMaxNewTokens);
  EXPECT_EQ(a.finished.completion_tokens, 24);
  EXPECT_EQ(a.finished.prompt_tokens, int32_t(prompts[0].size()));
  EXPECT_EQ(a.streamed, a.finished.full_text);
  EXPECT_GT(a.delta_tokens, 0);
  auto text_of = [](const std::vector<int32_t>& ids) {
    model::TextStream t(&tokenizer());
    EXPECT_TRUE(t.push(ids).ok());
    t.finish();
    return t.text();
  };
  EXPECT_EQ(a.finished.full_text, text_of(expected.outputs[0]));
  // A non-streamed request gets no deltas, only the finish with the whole text.
  EXPECT_EQ(b.delta_tokens, 0);
  EXPECT_EQ(b.finished.full_text, text_of(expected.outputs[1]));
  EXPECT_EQ(loop.in_flight(), 0);
  loop.shutdown(std::chrono::steady_clock::now());
  loop.join();  // the gauges are set after each step: read them once the thread ended
  const std::string t = metrics.serialize();
  EXPECT_NE(t.find("dsa:generation_tokens_total 48"), std::string::npos) << t;
  EXPECT_NE(t.find("dsa:num_requests_total{finish_reason=\"length\"} 2"), std::string::npos);
}

TEST(EngineLoop, CancelAbortsAndFreesPages) {
  auto prompts = heldout_prompts({30, 12});
  auto m = tiny_model(0, 2);
  const int32_t free_before = m->pages().num_free_pages();
  EngineLoop loop(*m, with_tokenizer(), {.max_running = 2, .max_queued = 2}, nullptr);
  loop.start();
  auto gone = loop.submit(request(prompts[0], 400), true, "gone");
  auto stays = loop.submit(request(prompts[1], 30), true, "stays");
  ASSERT_TRUE(gone.ok() && stays.ok());
  // Once it has streamed something, the client "goes away".
  while ((*gone)->wait(100ms).empty()) {
  }
  (*gone)->cancel();
  Collected g = collect(**gone);
  EXPECT_EQ(g.finished.finish, engine::FinishReason::kAborted);
  EXPECT_LT(g.finished.completion_tokens, 400);
  Collected s = collect(**stays);
  EXPECT_EQ(s.finished.finish, engine::FinishReason::kMaxNewTokens);
  EXPECT_EQ(s.finished.completion_tokens, 30);
  loop.shutdown(std::chrono::steady_clock::now());
  loop.join();  // the pool is read after the engine thread ended
  EXPECT_EQ(m->pages().num_free_pages(), free_before);
}

TEST(EngineLoop, BoundedQueueRefusalsAndShutdown) {
  auto prompts = heldout_prompts({10, 10, 10});
  auto m = tiny_model(0, 1);
  const int32_t free_before = m->pages().num_free_pages();
  EngineLoop loop(*m, with_tokenizer(), {.max_running = 1, .max_queued = 1}, nullptr);
  loop.start();
  auto first = loop.submit(request(prompts[0], 400), true, "1");
  auto second = loop.submit(request(prompts[1], 400), true, "2");
  auto third = loop.submit(request(prompts[2], 4), true, "3");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);  // the server answers 429
  EXPECT_NE(third.status().message().find("1 running + 1 queued"), std::string::npos);

  // The engine refuses a request alone (a prompt id outside the vocabulary): its own error.
  // (Submitted after the shutdown it would be refused at the door instead.)
  loop.shutdown(std::chrono::steady_clock::now() + 200ms);
  EXPECT_EQ(loop.submit(request(prompts[2], 4), true, "4").status().code(),
            StatusCode::kFailedPrecondition);
  Collected a = collect(**first);
  Collected b = collect(**second);
  EXPECT_EQ(a.finished.finish, engine::FinishReason::kAborted);  // 400 tokens take longer
  EXPECT_EQ(b.finished.finish, engine::FinishReason::kAborted);
  loop.join();
  EXPECT_EQ(m->pages().num_free_pages(), free_before);
}

TEST(EngineLoop, TheEnginesRefusalIsTheRequestsError) {
  auto m = tiny_model(0, 1);
  EngineLoop loop(*m, with_tokenizer(), {.max_running = 1, .max_queued = 1}, nullptr);
  loop.start();
  auto bad = loop.submit(request({1, 999999}, 4), false, "bad");
  ASSERT_TRUE(bad.ok());
  Collected c = collect(**bad);
  EXPECT_EQ(c.finished.finish, engine::FinishReason::kError);
  EXPECT_EQ(c.finished.error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loop.in_flight(), 0);
}

}  // namespace
}  // namespace dsa::server
