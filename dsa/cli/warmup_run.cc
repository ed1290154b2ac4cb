#include "dsa/cli/warmup_run.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "dsa/core/log.h"
#include "dsa/engine/warmup.h"

namespace dsa::cli {

Status run_warmup(model::DsaModel& model, const engine::EngineOptions& eo, const EngineSetup& setup,
                  const model::Tokenizer* tok) {
  if (!setup.warmup) return ok_status();
  std::vector<int32_t> prompt;
  if (tok != nullptr) prompt = tok->encode("The warm-up request of a serving process.", true);
  const int32_t vocab = int32_t(model.config().vocab_size);
  if (prompt.empty()) {
    for (int32_t id = 2; id < 10; ++id) prompt.push_back(id % vocab);
  }
  const auto t0 = std::chrono::steady_clock::now();
  DSA_RETURN_IF_ERROR(engine::warm_up(model, eo, std::move(prompt), setup.num_draft_tokens + 3)
                          .with_context("warm-up (--skip-warmup skips it)"));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  DSA_LOG_INFO("warm-up request: {:.1f} ms (--skip-warmup skips it)", ms);
  return ok_status();
}

}  // namespace dsa::cli
