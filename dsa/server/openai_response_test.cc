// The response JSON: OpenAI's field names and object values, ids, usage, stream chunks and their
// SSE framing, errors.
#include "dsa/server/openai_response.h"

#include <gtest/gtest.h>

namespace dsa::server {
namespace {

using nlohmann::json;

const ResponseMeta kCompletion{Endpoint::kCompletions, "cmpl-1", 1700000000, "tiny"};
const ResponseMeta kChat{Endpoint::kChat, "chatcmpl-1", 1700000000, "tiny"};

TEST(OpenAiResponse, Ids) {
  const std::string a = new_response_id(Endpoint::kCompletions);
  const std::string b = new_response_id(Endpoint::kCompletions);
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u) << a;
  EXPECT_EQ(a.size(), 5u + 24u);
  EXPECT_NE(a, b);
  EXPECT_EQ(new_response_id(Endpoint::kChat).rfind("chatcmpl-", 0), 0u);
}

TEST(OpenAiResponse, FinishReasons) {
  using engine::FinishReason;
  EXPECT_EQ(finish_reason_json(FinishReason::kEos), "stop");
  EXPECT_EQ(finish_reason_json(FinishReason::kStopString), "stop");
  EXPECT_EQ(finish_reason_json(FinishReason::kStopToken), "stop");
  EXPECT_EQ(finish_reason_json(FinishReason::kMaxNewTokens), "length");
  EXPECT_EQ(finish_reason_json(FinishReason::kMaxContext), "length");
  EXPECT_EQ(finish_reason_json(FinishReason::kAborted), "abort");
  EXPECT_TRUE(finish_reason_json(FinishReason::kNone).is_null());
}

TEST(OpenAiResponse, CompletionAndChatResponses) {
  json c = completion_json(kCompletion, "hello", engine::FinishReason::kMaxNewTokens, {3, 5});
  EXPECT_EQ(c["id"], "cmpl-1");
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["created"], 1700000000);
  EXPECT_EQ(c["model"], "tiny");
  ASSERT_EQ(c["choices"].size(), 1u);
  EXPECT_EQ(c["choices"][0]["index"], 0);
  EXPECT_EQ(c["choices"][0]["text"], "hello");
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"],
            (json{{"prompt_tokens", 3}, {"completion_tokens", 5}, {"total_tokens", 8}}));

  json m = completion_json(kChat, "hi", engine::FinishReason::kEos, {2, 1});
  EXPECT_EQ(m["object"], "chat.completion");
  EXPECT_EQ(m["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_EQ(m["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(m["choices"][0].contains("text"));
}

TEST(OpenAiResponse, StreamChunks) {
  json first = chunk_json(kChat, "", true, std::nullopt, false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));

  json delta = chunk_json(kChat, "abc", false, std::nullopt, true);
  EXPECT_EQ(delta["choices"][0]["delta"], (json{{"content", "abc"}}));
  EXPECT_TRUE(delta.contains("usage") && delta["usage"].is_null());

  json last = chunk_json(kChat, std::nullopt, false, engine::FinishReason::kStopString, false);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");

  json text = chunk_json(kCompletion, "x", false, std::nullopt, false);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "x");

  json usage = usage_chunk_json(kChat, {4, 6});
  EXPECT_TRUE(usage["choices"].is_array() && usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 10);

  const std::string event = sse_event(json{{"a", 1}});
  EXPECT_EQ(event, "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiResponse, ErrorsAndModels) {
  json e = error_json(
      ApiError{400, "top_p = 2: must be in (0, 1]", "invalid_request_error", "top_p", ""});
  EXPECT_EQ(e["error"]["message"], "top_p = 2: must be in (0, 1]");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "top_p");
  EXPECT_TRUE(e["error"]["code"].is_null());
  json q = error_json(ApiError{429, "full", "rate_limit_error", "", "queue_full"});
  EXPECT_TRUE(q["error"]["param"].is_null());
  EXPECT_EQ(q["error"]["code"], "queue_full");

  json l = models_json("tiny", 5);
  EXPECT_EQ(l["object"], "list");
  EXPECT_EQ(l["data"][0]["id"], "tiny");
  EXPECT_EQ(l["data"][0]["object"], "model");
  // Invalid UTF-8 never throws out of dump (it is replaced).
  EXPECT_NO_THROW(dump(json{{"s", std::string("\xff")}}));
}

}  // namespace
}  // namespace dsa::server
