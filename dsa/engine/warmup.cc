#include "dsa/engine/warmup.h"

#include <fmt/format.h>

#include <utility>

namespace dsa::engine {

Status warm_up(model::DsaModel& model, EngineOptions options, std::vector<int32_t> prompt,
               int32_t new_tokens) {
  if (prompt.empty()) return invalid_argument("warm-up: prompt is empty");
  if (new_tokens < 1) {
    return invalid_argument(fmt::format("warm-up: new_tokens = {}: must be >= 1", new_tokens));
  }
  options.on_tokens = nullptr;
  options.on_finish = nullptr;
  options.draft_override = nullptr;
  Engine eng(model, options);
  GenerationRequest req;
  req.prompt = std::move(prompt);
  req.max_new_tokens = new_tokens;
  req.ignore_eos = true;  // the full length: prefill, then every kind of decode step
  DSA_ASSIGN_OR_RETURN(const int64_t id, eng.add_request(std::move(req)));
  while (eng.has_work()) DSA_RETURN_IF_ERROR(eng.step());
  const RequestState* r = eng.find(id);
  if (r != nullptr && r->finish == FinishReason::kError) {
    return r->error.with_context("warm-up request");
  }
  if (r != nullptr) DSA_RETURN_IF_ERROR(eng.release(id));
  return model.reset_measurements();
}

}  // namespace dsa::engine
