// Request parsing and checking: every field's bad values give a 400 naming the field (and the
// value), good requests parse into the engine request they mean.
#include "dsa/server/openai_request.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "dsa/engine/engine_test_util.h"

namespace dsa::server {
namespace {

constexpr int64_t kVocab = 1000;
constexpr int64_t kContext = 128;

ApiResult<OpenAiRequest> parse(Endpoint e, const std::string& body) {
  return parse_request(e, body, kVocab, kContext);
}

OpenAiRequest ok(Endpoint e, const std::string& body) {
  auto r = parse(e, body);
  if (auto* err = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << err->message;
    return {};
  }
  return std::get<OpenAiRequest>(r);
}

struct Bad {
  std::string body;
  std::string param;    // the field named in error.param
  std::string message;  // a substring of error.message
};

void expect_bad(Endpoint e, const Bad& b) {
  auto r = parse(e, b.body);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << b.body;
  const ApiError& err = std::get<ApiError>(r);
  EXPECT_EQ(err.http_status, 400) << b.body;
  EXPECT_EQ(err.type, "invalid_request_error") << b.body;
  EXPECT_EQ(err.param, b.param) << b.body << " -> " << err.message;
  EXPECT_NE(err.message.find(b.message), std::string::npos)
      << b.body << " -> " << err.message << " (wanted '" << b.message << "')";
}

TEST(OpenAiRequest, ParsesACompletionRequest) {
  OpenAiRequest r = ok(Endpoint::kCompletions,
                       R"({"model": "m", "prompt": "Hi", "max_tokens": 7, "temperature": 0.5,
                           "top_p": 0.9, "top_k": 40, "seed": 12, "stop": ["a", "bc"],
                           "stream": true, "stream_options": {"include_usage": true},
                           "ignore_eos": true, "n": 1, "user": "u", "logprobs": null,
                           "echo": false, "presence_penalty": 0, "stop_token_ids": [5],
                           "some_future_field": {"x": 1}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_DOUBLE_EQ(r.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.seed, 12u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_EQ(r.stop_token_ids, std::vector<int32_t>{5});

  OpenAiRequest d = ok(Endpoint::kCompletions, R"({"prompt": [1, 2, 3], "stop": "x"})");
  EXPECT_EQ(d.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(d.max_tokens);
  EXPECT_DOUBLE_EQ(d.temperature, 1.0);  // OpenAI's defaults
  EXPECT_FALSE(d.seed);
  EXPECT_EQ(d.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": ["one"]})").prompt_text, "one");
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": [[4, 5]]})").prompt_ids,
            (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": "x", "top_k": -1})").top_k, 0);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": "x", "seed": -1})").seed, UINT64_MAX);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": "x", "seed": 18446744073709551615})").seed,
            UINT64_MAX);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": null})").max_tokens,
            std::nullopt);
}

TEST(OpenAiRequest, ParsesAChatRequest) {
  OpenAiRequest r = ok(Endpoint::kChat, R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
      {"role": "assistant", "content": "Hi", "name": "bot"}],
      "max_completion_tokens": 9, "logprobs": false, "tools": [], "tool_choice": "none",
      "response_format": {"type": "text"}})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hello");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(ok(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
                                    "max_tokens": 4, "max_completion_tokens": 4})")
                .max_tokens,
            4);
}

TEST(OpenAiRequest, RefusesBadBodies) {
  for (const Bad& b : std::vector<Bad>{
           {"", "", "not valid JSON"},
           {R"({"prompt": "x")", "", "not valid JSON"},
           {"{\"prompt\": \"\xff\xfe\"}", "", "UTF-8"},
           {"[1, 2]", "", "must be a JSON object"},
           {"\"text\"", "", "must be a JSON object"},
           {"null", "", "must be a JSON object"},
       }) {
    expect_bad(Endpoint::kCompletions, b);
  }
}

TEST(OpenAiRequest, RefusesBadCompletionFields) {
  const std::string big = "99999999999999999999999";
  for (const Bad& b : std::vector<Bad>{
           {R"({})", "prompt", "required"},
           {R"({"prompt": 5})", "prompt", "must be a string or an array"},
           {R"({"prompt": []})", "prompt", "empty"},
           {R"({"prompt": ["a", "b"]})", "prompt", "batched"},
           {R"({"prompt": [1, "a"]})", "prompt", "batched"},
           {R"({"prompt": [1, 1000]})", "prompt[1]", "prompt[1] = 1000: must be in [0, 999]"},
           {R"({"prompt": [1, -1]})", "prompt[1]", "must be in [0, 999]"},
           {R"({"prompt": [1.5]})", "prompt[0]", "must be an integer"},
           {R"({"prompt": "x", "model": 3})", "model", "must be a string"},
           {R"({"prompt": "x", "max_tokens": 0})", "max_tokens",
            "max_tokens = 0: must be in [1, 127]"},
           {R"({"prompt": "x", "max_tokens": -5})", "max_tokens", "must be in [1, 127]"},
           {R"({"prompt": "x", "max_tokens": 128})", "max_tokens", "must be in [1, 127]"},
           {R"({"prompt": "x", "max_tokens": )" + big + "}", "max_tokens", "must be an integer"},
           {R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens",
            "must be in [1, 127]"},
           {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens", "must be an integer"},
           {R"({"prompt": "x", "max_tokens": "8"})", "max_tokens", "got a string"},
           {R"({"prompt": "x", "max_tokens": 4, "max_completion_tokens": 5})",
            "max_completion_tokens", "give one"},
           {R"({"prompt": "x", "temperature": -0.1})", "temperature", "temperature = -0.1"},
           {R"({"prompt": "x", "temperature": 1e300})", "temperature", "must be in [0, 1e6]"},
           {R"({"prompt": "x", "temperature": 1e999})", "", "number overflow"},
           {R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number"},
           {R"({"prompt": "x", "temperature": true})", "temperature", "got a boolean"},
           {R"({"prompt": "x", "top_p": 0})", "top_p", "top_p = 0: must be in (0, 1]"},
           {R"({"prompt": "x", "top_p": 1.5})", "top_p", "must be in (0, 1]"},
           {R"({"prompt": "x", "top_p": [1]})", "top_p", "must be a number"},
           {R"({"prompt": "x", "top_k": -2})", "top_k", "top_k = -2"},
           {R"({"prompt": "x", "top_k": 1.5})", "top_k", "must be an integer"},
           {R"({"prompt": "x", "top_k": 99999999999})", "top_k", "must be in"},
           {R"({"prompt": "x", "seed": 1.5})", "seed", "64-bit integer"},
           {R"({"prompt": "x", "seed": )" + big + "}", "seed", "64-bit integer"},
           {R"({"prompt": "x", "seed": "1"})", "seed", "64-bit integer"},
           {R"({"prompt": "x", "n": 2})", "n", "only n = 1"},
           {R"({"prompt": "x", "n": 0})", "n", "must be in"},
           {R"({"prompt": "x", "n": "1"})", "n", "must be an integer"},
           {R"({"prompt": "x", "stop": 5})", "stop", "must be a string or an array"},
           {R"({"prompt": "x", "stop": [""]})", "stop", "stop[0]: must not be empty"},
           {R"({"prompt": "x", "stop": ""})", "stop", "must not be empty"},
           {R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]", "must be a string"},
           {R"({"prompt": "x", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13",
                "14","15","16","17"]})",
            "stop", "at most 16"},
           {R"({"prompt": "x", "stop_token_ids": [5000]})", "stop_token_ids[0]", "must be in"},
           {R"({"prompt": "x", "stop_token_ids": 5})", "stop_token_ids", "must be an array"},
           {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos", "must be a boolean"},
           {R"({"prompt": "x", "stream": "yes"})", "stream", "must be a boolean"},
           {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options",
            "only allowed with stream = true"},
           {R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options",
            "must be an object"},
           {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": "y"}})",
            "stream_options.include_usage", "must be a boolean"},
           {R"({"prompt": "x", "user": 5})", "user", "must be a string"},
           {R"({"prompt": "x", "logprobs": 2})", "logprobs", "not supported"},
           {R"({"prompt": "x", "echo": true})", "echo", "not supported"},
           {R"({"prompt": "x", "best_of": 3})", "best_of", "best_of = 1"},
           {R"({"prompt": "x", "suffix": "end"})", "suffix", "not supported"},
           {R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty", "not supported"},
           {R"({"prompt": "x", "frequency_penalty": 1})", "frequency_penalty", "not supported"},
           {R"({"prompt": "x", "logit_bias": {"5": 10}})", "logit_bias", "not supported"},
       }) {
    expect_bad(Endpoint::kCompletions, b);
  }
}

TEST(OpenAiRequest, RefusesBadChatFields) {
  for (const Bad& b : std::vector<Bad>{
           {R"({})", "messages", "required"},
           {R"({"messages": []})", "messages", "must not be empty"},
           {R"({"messages": "hi"})", "messages", "must be an array"},
           {R"({"messages": ["hi"]})", "messages[0]", "must be an object"},
           {R"({"messages": [{"content": "x"}]})", "messages[0].role", "required"},
           {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role",
            "\"robot\": must be system, user or assistant"},
           {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role",
            "must be a string"},
           {R"({"messages": [{"role": "user"}]})", "messages[0].content", "required"},
           {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content",
            "must be a string or an array of text parts"},
           {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
            "messages[0].content[0].type", "only \"text\" parts"},
           {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
            "messages[0].content[0].text", "required"},
           {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]})",
            "messages[0].content[0].text", "must be a string"},
           {R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content[0]",
            "must be an object"},
           {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs",
            "not supported"},
           {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
            "tools", "not supported"},
           {R"({"messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_object"}})",
            "response_format", "only"},
           {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
            "max_completion_tokens", "must be in [1, 127]"},
       }) {
    expect_bad(Endpoint::kChat, b);
  }
}

// prepare(): tokenization as `dsa generate` does it (BOS + text), ids as given, chat through the
// template; the context limits.
TEST(OpenAiRequest, PreparesTheEngineRequest) {
  const model::Tokenizer& tok = engine::testing::tokenizer();
  model::ChatTemplate chat;
  PrepareContext ctx{&tok, &chat, kContext, 16, 77};
  OpenAiRequest c = ok(Endpoint::kCompletions,
                       R"({"prompt": "And the king", "temperature": 0, "stop": ["x"],
                           "ignore_eos": true})");
  auto g = std::get<engine::GenerationRequest>(prepare(c, ctx));
  EXPECT_EQ(g.prompt, tok.encode("And the king", /*add_bos=*/true));
  EXPECT_EQ(g.max_new_tokens, 16);  // the completions default
  EXPECT_EQ(g.sampling.temperature, 0.f);
  EXPECT_EQ(g.sampling.seed, 77u);  // the caller's draw when the request has no seed
  EXPECT_EQ(g.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(g.ignore_eos);

  OpenAiRequest ids = ok(Endpoint::kCompletions, R"({"prompt": [7, 8], "seed": 3})");
  g = std::get<engine::GenerationRequest>(prepare(ids, ctx));
  EXPECT_EQ(g.prompt, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(g.sampling.seed, 3u);

  OpenAiRequest m = ok(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "Hi"}]})");
  g = std::get<engine::GenerationRequest>(prepare(m, ctx));
  EXPECT_EQ(g.prompt, tok.encode("User: Hi\n\nAssistant:", /*add_bos=*/true));
  EXPECT_EQ(g.max_new_tokens, kContext - int32_t(g.prompt.size()));  // chat: the whole room

  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += " the";
  OpenAiRequest too_long = ok(Endpoint::kCompletions, R"({"prompt": ")" + long_text + R"("})");
  auto e = std::get<ApiError>(prepare(too_long, ctx));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("the context length is 128"), std::string::npos) << e.message;

  OpenAiRequest too_many =
      ok(Endpoint::kCompletions, R"({"prompt": [1, 2, 3], "max_tokens": 126})");
  e = std::get<ApiError>(prepare(too_many, ctx));
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("at most 125 new tokens"), std::string::npos) << e.message;
  OpenAiRequest fits = ok(Endpoint::kCompletions, R"({"prompt": [1, 2, 3], "max_tokens": 125})");
  EXPECT_TRUE(std::holds_alternative<engine::GenerationRequest>(prepare(fits, ctx)));
}

}  // namespace
}  // namespace dsa::server
