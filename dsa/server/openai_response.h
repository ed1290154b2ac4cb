// The JSON the server answers with (the OpenAI wire format): whole responses, stream chunks framed
// as server-sent events, errors, the model list.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "dsa/engine/request.h"
#include "dsa/server/api_error.h"
#include "dsa/server/openai_request.h"

namespace dsa::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// What every response and chunk of one request repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh id for a response of `endpoint`: the prefix and 24 random hex digits.
std::string new_response_id(Endpoint endpoint);

// OpenAI's finish_reason: "stop" (EOS, a stop string or id), "length" (max_tokens or the
// context), "abort" (SGLang's word for a request the server gave up on), "error"; "" while
// running. The one mapping, shared by the responses and the metrics' finish_reason label.
std::string_view openai_finish_reason(engine::FinishReason r);
// The same as JSON: null while running.
nlohmann::json finish_reason_json(engine::FinishReason r);

nlohmann::json usage_json(const Usage& u);
nlohmann::json error_json(const ApiError& e);

// The non-streamed answer: text_completion or chat.completion with one choice and usage.
nlohmann::json completion_json(const ResponseMeta& m, std::string_view text,
                               engine::FinishReason finish, const Usage& u);

// One stream chunk with one choice: a text delta (chat: delta.content; with `role` the chat
// stream's first chunk, delta.role = "assistant"), and finish_reason when `finish` is set. With
// `usage_null` the chunk carries "usage": null, as OpenAI's do once include_usage is asked for.
nlohmann::json chunk_json(const ResponseMeta& m, std::optional<std::string_view> text, bool role,
                          std::optional<engine::FinishReason> finish, bool usage_null);
// The last chunk of a stream with include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const Usage& u);

// GET /v1/models.
nlohmann::json models_json(std::string_view model, int64_t created);

// JSON text (invalid UTF-8 replaced, never thrown on) and its server-sent-event framing.
std::string dump(const nlohmann::json& j);
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace dsa::server
