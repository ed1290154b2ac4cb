#include "dsa/engine/request.h"

#include <algorithm>

namespace dsa::engine {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kMaxContext:
      return "max_context";
    case FinishReason::kError:
      return "error";
    case FinishReason::kAborted:
      return "abort";
  }
  return "?";
}

size_t RequestState::stable_text_size() const {
  const std::string& t = text.text();
  if (finish != FinishReason::kNone) return t.size();
  size_t hold = 0;
  for (const std::string& s : req.stop) hold = std::max(hold, s.size() - 1);
  size_t n = t.size() > hold ? t.size() - hold : 0;
  while (n > 0 && n < t.size() && (static_cast<unsigned char>(t[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace dsa::engine
