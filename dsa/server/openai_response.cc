#include "dsa/server/openai_response.h"

#include <fmt/format.h>

#include <mutex>
#include <random>

namespace dsa::server {

using nlohmann::json;

namespace {

json or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

std::string_view object_of(Endpoint e, bool chunk) {
  if (e == Endpoint::kCompletions) return "text_completion";  // OpenAI streams the same object
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json head(const ResponseMeta& m, bool chunk) {
  return {{"id", m.id},
          {"object", object_of(m.endpoint, chunk)},
          {"created", m.created},
          {"model", m.model}};
}

}  // namespace

std::string new_response_id(Endpoint endpoint) {
  // One generator for every HTTP thread, seeded once from the OS: ids need to be unique, not
  // secret.
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  uint64_t a, b;
  {
    std::lock_guard lock(mu);
    a = gen();
    b = gen();
  }
  return fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", a,
                     uint32_t(b));
}

std::string_view openai_finish_reason(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kEos:
    case engine::FinishReason::kStopToken:
    case engine::FinishReason::kStopString:
      return "stop";
    case engine::FinishReason::kMaxNewTokens:
    case engine::FinishReason::kMaxContext:
      return "length";
    case engine::FinishReason::kAborted:
      return "abort";
    case engine::FinishReason::kError:
      return "error";
    case engine::FinishReason::kNone:
      break;
  }
  return "";
}

json finish_reason_json(engine::FinishReason r) {
  const std::string_view name = openai_finish_reason(r);
  return name.empty() ? json(nullptr) : json(std::string(name));
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", or_null(e.param)},
            {"code", or_null(e.code)}}}};
}

json completion_json(const ResponseMeta& m, std::string_view text, engine::FinishReason finish,
                     const Usage& u) {
  json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason_json(finish)}};
  if (m.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  json j = head(m, false);
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

json chunk_json(const ResponseMeta& m, std::optional<std::string_view> text, bool role,
                std::optional<engine::FinishReason> finish, bool usage_null) {
  json choice = {{"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", finish ? finish_reason_json(*finish) : json(nullptr)}};
  if (m.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text.value_or("");
  }
  json j = head(m, true);
  j["choices"] = json::array({choice});
  if (usage_null) j["usage"] = nullptr;
  return j;
}

json usage_chunk_json(const ResponseMeta& m, const Usage& u) {
  json j = head(m, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

json models_json(std::string_view model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "dsa"},
                                 {"root", model}}})}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace dsa::server
