#include "dsa/server/request_event.h"

#include <algorithm>

namespace dsa::server {

std::optional<RequestEvent> delta_event(const engine::RequestState& r,
                                        std::span<const int32_t> tokens, size_t* text_sent) {
  const size_t stable = r.stable_text_size();
  if (stable <= *text_sent) return std::nullopt;
  RequestEvent e;
  e.text = r.text.text().substr(*text_sent, stable - *text_sent);
  e.num_tokens = int32_t(tokens.size());
  *text_sent = stable;
  return e;
}

RequestEvent finished_event(const engine::RequestState& r, size_t text_sent) {
  const std::string& text = r.text.text();
  RequestEvent e;
  e.kind = RequestEvent::Kind::kFinished;
  e.finish = r.finish;
  e.error = r.error;
  e.full_text = text;
  e.text = text.substr(std::min(text_sent, text.size()));
  e.prompt_tokens = r.prompt_len();
  e.completion_tokens = int32_t(r.output.size());
  return e;
}

RequestEvent error_event(const Status& why, int32_t prompt_tokens) {
  RequestEvent e;
  e.kind = RequestEvent::Kind::kFinished;
  e.finish = engine::FinishReason::kError;
  e.error = why;
  e.prompt_tokens = prompt_tokens;
  return e;
}

}  // namespace dsa::server
