// Parsing and checking of the JSON body of POST /v1/completions and /v1/chat/completions (the
// OpenAI wire format, plus SGLang's ignore_eos, top_k and stop_token_ids). Every field is
// type- and range-checked; a bad one is an ApiError (HTTP 400) naming the field and its value.
// Fields the engine cannot honour are refused unless they hold their neutral value (logprobs,
// echo, penalties, tools, ...): silently ignoring them would return something the client did not
// ask for. Fields that change nothing (user, model) are accepted; unknown fields are ignored, as
// the OpenAI API grows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dsa/engine/request.h"
#include "dsa/model/chat_template.h"
#include "dsa/model/tokenizer.h"
#include "dsa/server/api_error.h"

namespace dsa::server {

enum class Endpoint { kCompletions, kChat };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                         // as sent ("" if absent)
  std::optional<std::string> prompt_text;    // completions: a string prompt
  std::vector<int32_t> prompt_ids;           // completions: a prompt of token ids
  std::vector<model::ChatMessage> messages;  // chat
  std::optional<int64_t> max_tokens;         // unset: the endpoint's default
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;  // 0 = off (SGLang's -1 is accepted and means off too)
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

template <class T>
using ApiResult = std::variant<T, ApiError>;

// Parses `body` (which must be a JSON object) for `endpoint`. Token ids are checked against
// `vocab_size`; max_tokens against `context_length` (the prompt is checked in prepare()).
ApiResult<OpenAiRequest> parse_request(Endpoint endpoint, std::string_view body, int64_t vocab_size,
                                       int64_t context_length);

struct PrepareContext {
  const model::Tokenizer* tokenizer = nullptr;
  const model::ChatTemplate* chat = nullptr;
  int64_t context_length = 0;
  int64_t default_completion_tokens = 16;  // /v1/completions without max_tokens (OpenAI's 16)
  uint64_t default_seed = 0;               // a request without a seed (the caller draws it)
};

// The engine request: the prompt tokenized (a text prompt gets BOS, as `dsa generate` does; a
// prompt of ids is used as given; chat messages are rendered by the chat template), the sampling
// parameters, the stop conditions. 400 when the prompt is empty or leaves no room in the context,
// or prompt + max_tokens exceeds it.
ApiResult<engine::GenerationRequest> prepare(const OpenAiRequest& r, const PrepareContext& ctx);

}  // namespace dsa::server
