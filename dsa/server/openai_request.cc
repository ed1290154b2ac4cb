#include "dsa/server/openai_request.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "dsa/model/text_stream.h"

namespace dsa::server {

namespace {

using nlohmann::json;

// Most stop strings per request (OpenAI allows 4; the engine matches each against every token, so
// a bound keeps a request's cost bounded) and the longest one.
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 1024;

// The checks below throw the ApiError they find (caught once in parse_request): each reads as the
// rule it enforces, without threading a result through every line.
[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw bad_request(param, message);
}

// A value as it appears in the request, cut short: error messages name what was sent. Arrays
// and objects are not written out (one nested a million levels deep would recurse as deep).
std::string shown(const json& v) {
  if (v.is_array()) return "[...]";
  if (v.is_object()) return "{...}";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

std::string_view type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return v.is_number_integer() ? "an integer" : "a number";
}

// The field if present and not null (null means "the default" for every optional field).
const json* field(const json& o, const char* name) {
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const std::string& name) {
  if (!v.is_number()) refuse(name, fmt::format("{}: must be a number, got {}", name, type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x)) refuse(name, fmt::format("{} = {}: must be finite", name, shown(v)));
  return x;
}

// An integer within [lo, hi]; unsigned JSON integers above INT64_MAX are out of any range here.
int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) {
    refuse(name, fmt::format("{} = {}: must be an integer, got {}", name, shown(v), type_name(v)));
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) {
    refuse(name, fmt::format("{} = {}: must be in [{}, {}]", name, shown(v), lo, hi));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    refuse(name, fmt::format("{} = {}: must be in [{}, {}]", name, x, lo, hi));
  }
  return x;
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) {
    refuse(name, fmt::format("{} = {}: must be a boolean, got {}", name, shown(v), type_name(v)));
  }
  return v.get<bool>();
}

const std::string& string(const json& v, const std::string& name) {
  if (!v.is_string()) {
    refuse(name, fmt::format("{} = {}: must be a string, got {}", name, shown(v), type_name(v)));
  }
  return v.get_ref<const std::string&>();
}

int32_t token_id(const json& v, const std::string& name, int64_t vocab) {
  return int32_t(integer(v, name, 0, vocab - 1));
}

// Features the engine does not implement are accepted only at their neutral value.
void refuse_unsupported(const json& o, Endpoint endpoint) {
  auto neutral = [&](const char* name, auto is_neutral, const char* why) {
    const json* v = field(o, name);
    if (v != nullptr && !is_neutral(*v)) {
      refuse(name, fmt::format("{} = {}: {}", name, shown(*v), why));
    }
  };
  auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
  auto is_zero = [](const json& v) { return v.is_number() && v.get<double>() == 0; };
  auto is_one = [](const json& v) { return v.is_number() && v.get<double>() == 1; };
  auto is_empty = [](const json& v) {
    return (v.is_object() || v.is_array() || v.is_string()) && v.empty();
  };
  if (endpoint == Endpoint::kCompletions) {
    neutral("logprobs", is_zero, "log probabilities are not supported");
    neutral("echo", is_false, "echoing the prompt is not supported");
    neutral("best_of", is_one, "only best_of = 1 is supported");
    neutral("suffix", is_empty, "suffixes (insertion) are not supported");
  } else {
    neutral("logprobs", is_false, "log probabilities are not supported");
    neutral("top_logprobs", is_zero, "log probabilities are not supported");
    neutral("tools", is_empty, "tool calls are not supported");
    neutral(
        "tool_choice", [](const json& v) { return v == "none"; }, "tool calls are not supported");
    neutral(
        "response_format",
        [](const json& v) {
          if (!v.is_object()) return false;
          auto t = v.find("type");
          return t != v.end() && *t == "text";
        },
        "only {\"type\": \"text\"} is supported");
  }
  neutral("presence_penalty", is_zero, "penalties are not supported");
  neutral("frequency_penalty", is_zero, "penalties are not supported");
  neutral("repetition_penalty", is_one, "penalties are not supported");
  neutral("logit_bias", is_empty, "logit biases are not supported");
  neutral("min_p", is_zero, "min_p is not supported");
  neutral("min_tokens", is_zero, "min_tokens is not supported");
}

void parse_prompt(const json& o, int64_t vocab, OpenAiRequest& r) {
  const json* p = field(o, "prompt");
  if (p == nullptr) refuse("prompt", "prompt: required (a string or an array of token ids)");
  // OpenAI also takes a batch (an array of strings or of id arrays): one prompt only here.
  const json* one = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    one = &(*p)[0];
  }
  if (one->is_string()) {
    r.prompt_text = one->get<std::string>();
    return;
  }
  if (!one->is_array()) {
    refuse("prompt", fmt::format("prompt: must be a string or an array of token ids, got {}",
                                 type_name(*one)));
  }
  if (one->empty()) refuse("prompt", "prompt: the array of token ids is empty");
  for (size_t i = 0; i < one->size(); ++i) {
    const json& t = (*one)[i];
    if (t.is_string() || t.is_array()) {
      refuse("prompt", "prompt: batched prompts are not supported (send one prompt per request)");
    }
    r.prompt_ids.push_back(token_id(t, fmt::format("prompt[{}]", i), vocab));
  }
}

// content: a string, or an array of {"type": "text", "text": "..."} parts (joined).
std::string message_content(const json& c, const std::string& name) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    refuse(name, fmt::format("{}: must be a string or an array of text parts, got {}", name,
                             type_name(c)));
  }
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string part = fmt::format("{}[{}]", name, i);
    if (!c[i].is_object()) refuse(part, fmt::format("{}: must be an object", part));
    const json* type = field(c[i], "type");
    if (type == nullptr || !type->is_string() || *type != "text") {
      refuse(part + ".type", fmt::format("{}.type = {}: only \"text\" parts are supported", part,
                                         type == nullptr ? "null" : shown(*type)));
    }
    const json* text = field(c[i], "text");
    if (text == nullptr) refuse(part + ".text", fmt::format("{}.text: required", part));
    out += string(*text, part + ".text");
  }
  return out;
}

void parse_messages(const json& o, OpenAiRequest& r) {
  const json* m = field(o, "messages");
  if (m == nullptr) refuse("messages", "messages: required (a non-empty array)");
  if (!m->is_array()) {
    refuse("messages", fmt::format("messages: must be an array, got {}", type_name(*m)));
  }
  if (m->empty()) refuse("messages", "messages: must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string name = fmt::format("messages[{}]", i);
    const json& msg = (*m)[i];
    if (!msg.is_object()) {
      refuse(name, fmt::format("{}: must be an object, got {}", name, type_name(msg)));
    }
    const json* role = field(msg, "role");
    if (role == nullptr) refuse(name + ".role", fmt::format("{}.role: required", name));
    const std::string& role_s = string(*role, name + ".role");
    if (role_s != "system" && role_s != "user" && role_s != "assistant") {
      refuse(name + ".role",
             fmt::format("{}.role = {}: must be system, user or assistant", name, shown(*role)));
    }
    const json* content = field(msg, "content");
    if (content == nullptr) refuse(name + ".content", fmt::format("{}.content: required", name));
    r.messages.push_back({role_s, message_content(*content, name + ".content")});
  }
}

void parse_stop(const json& o, OpenAiRequest& r) {
  const json* s = field(o, "stop");
  if (s == nullptr) return;
  std::vector<std::string> stops;
  if (s->is_string()) {
    stops.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > kMaxStopStrings) {
      refuse("stop", fmt::format("stop: {} strings; at most {}", s->size(), kMaxStopStrings));
    }
    for (size_t i = 0; i < s->size(); ++i) {
      stops.push_back(string((*s)[i], fmt::format("stop[{}]", i)));
    }
  } else {
    refuse("stop",
           fmt::format("stop: must be a string or an array of strings, got {}", type_name(*s)));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) refuse("stop", fmt::format("stop[{}]: must not be empty", i));
    if (stops[i].size() > kMaxStopBytes) {
      refuse("stop",
             fmt::format("stop[{}]: {} bytes; at most {}", i, stops[i].size(), kMaxStopBytes));
    }
  }
  r.stop = std::move(stops);
}

OpenAiRequest parse_object(Endpoint endpoint, const json& o, int64_t vocab, int64_t context) {
  OpenAiRequest r;
  r.endpoint = endpoint;
  if (const json* v = field(o, "model")) r.model = string(*v, "model");
  if (endpoint == Endpoint::kCompletions) {
    parse_prompt(o, vocab, r);
  } else {
    parse_messages(o, r);
  }
  // max_completion_tokens is the newer name of max_tokens (chat); either is accepted, both only
  // when they agree.
  const json* mt = field(o, "max_tokens");
  const json* mct = field(o, "max_completion_tokens");
  if (mt != nullptr) r.max_tokens = integer(*mt, "max_tokens", 1, context - 1);
  if (mct != nullptr) {
    const int64_t v = integer(*mct, "max_completion_tokens", 1, context - 1);
    if (r.max_tokens && *r.max_tokens != v) {
      refuse("max_completion_tokens",
             fmt::format("max_completion_tokens = {} and max_tokens = {}: give one", v,
                         *r.max_tokens));
    }
    r.max_tokens = v;
  }
  if (const json* v = field(o, "temperature")) {
    r.temperature = number(*v, "temperature");
    if (r.temperature < 0 || r.temperature > 1e6) {
      refuse("temperature", fmt::format("temperature = {}: must be in [0, 1e6]", shown(*v)));
    }
  }
  if (const json* v = field(o, "top_p")) {
    r.top_p = number(*v, "top_p");
    if (!(r.top_p > 0 && r.top_p <= 1)) {
      refuse("top_p", fmt::format("top_p = {}: must be in (0, 1]", shown(*v)));
    }
  }
  if (const json* v = field(o, "top_k")) {
    // SGLang: -1 disables top-k; 0 (vLLM's "off") is accepted as the same.
    const int64_t k = integer(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    r.top_k = k < 0 ? 0 : int32_t(k);
  }
  if (const json* v = field(o, "seed")) {
    if (!v->is_number_integer()) {
      refuse("seed",
             fmt::format("seed = {}: must be a 64-bit integer, got {}", shown(*v), type_name(*v)));
    }
    // Any 64-bit integer, signed or unsigned: its bits are the Philox key.
    r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  }
  if (const json* v = field(o, "n")) {
    if (integer(*v, "n", 1, INT64_MAX) != 1) {
      refuse("n", fmt::format("n = {}: only n = 1 is supported", v->get<int64_t>()));
    }
  }
  parse_stop(o, r);
  if (const json* v = field(o, "stop_token_ids")) {
    if (!v->is_array()) {
      refuse("stop_token_ids",
             fmt::format("stop_token_ids: must be an array of token ids, got {}", type_name(*v)));
    }
    for (size_t i = 0; i < v->size(); ++i) {
      r.stop_token_ids.push_back(token_id((*v)[i], fmt::format("stop_token_ids[{}]", i), vocab));
    }
  }
  if (const json* v = field(o, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(o, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(o, "stream_options")) {
    if (!r.stream) refuse("stream_options", "stream_options: only allowed with stream = true");
    if (!v->is_object()) {
      refuse("stream_options",
             fmt::format("stream_options: must be an object, got {}", type_name(*v)));
    }
    if (const json* u = field(*v, "include_usage")) {
      r.include_usage = boolean(*u, "stream_options.include_usage");
    }
  }
  if (const json* v = field(o, "user")) string(*v, "user");
  refuse_unsupported(o, endpoint);
  return r;
}

}  // namespace

ApiResult<OpenAiRequest> parse_request(Endpoint endpoint, std::string_view body, int64_t vocab_size,
                                       int64_t context_length) {
  // The parser checks UTF-8 inside strings too: invalid bytes are a parse error, not a crash.
  json o = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (o.is_discarded()) {
    try {
      json again = json::parse(body);  // again, for the parser's message (where and what)
    } catch (const json::exception& e) {
      return bad_request("", fmt::format("the body is not valid JSON: {}", e.what()));
    }
    return bad_request("", "the body is not valid JSON");
  }
  if (!o.is_object()) {
    return bad_request("", fmt::format("the body must be a JSON object, got {}", type_name(o)));
  }
  try {
    return parse_object(endpoint, o, vocab_size, context_length);
  } catch (const ApiError& e) {
    return e;
  }
}

ApiResult<engine::GenerationRequest> prepare(const OpenAiRequest& r, const PrepareContext& ctx) {
  engine::GenerationRequest g;
  if (r.endpoint == Endpoint::kChat) {
    StatusOr<std::string> text = model::render_chat(*ctx.chat, r.messages);
    if (!text.ok()) return bad_request("messages", text.status().message());
    // A template that writes BOS itself (as text) gets no second one.
    const bool has_bos = !ctx.chat->bos_token.empty() && text->starts_with(ctx.chat->bos_token);
    g.prompt = ctx.tokenizer->encode(*text, /*add_bos=*/!has_bos);
  } else if (r.prompt_text) {
    g.prompt = ctx.tokenizer->encode(*r.prompt_text, /*add_bos=*/true);
  } else {
    g.prompt = r.prompt_ids;
  }
  const int64_t n = int64_t(g.prompt.size());
  const char* param = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (n == 0) return bad_request(param, fmt::format("{}: no tokens", param));
  if (n >= ctx.context_length) {
    return ApiError{400,
                    fmt::format("{}: {} tokens; the context length is {} (prompt + completion)",
                                param, n, ctx.context_length),
                    "invalid_request_error", param, "context_length_exceeded"};
  }
  const int64_t room = ctx.context_length - n;
  if (r.max_tokens && *r.max_tokens > room) {
    return ApiError{400,
                    fmt::format("max_tokens = {}: the prompt has {} tokens and the context length "
                                "is {}: at most {} new tokens",
                                *r.max_tokens, n, ctx.context_length, room),
                    "invalid_request_error", "max_tokens", "context_length_exceeded"};
  }
  // Chat without a limit may fill the context (as vLLM and SGLang); completions default to 16.
  g.max_new_tokens = int32_t(r.max_tokens.value_or(
      r.endpoint == Endpoint::kChat ? room : std::min(room, ctx.default_completion_tokens)));
  g.sampling.temperature = float(r.temperature);
  g.sampling.top_p = float(r.top_p);
  g.sampling.top_k = r.top_k;
  g.sampling.seed = r.seed.value_or(ctx.default_seed);
  g.stop = r.stop;
  g.stop_token_ids = r.stop_token_ids;
  g.ignore_eos = r.ignore_eos;
  return g;
}

}  // namespace dsa::server
