// The warm-up of `dsa generate` and `dsa serve` (engine/warmup.h), where EngineSetup::warmup (on
// cuda unless --skip-warmup).
#pragma once

#include "dsa/cli/engine_args.h"
#include "dsa/core/status.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/tokenizer.h"

namespace dsa::cli {

// One request of a fixed short text (its ids under `tok`, else ids 2..9), num_draft_tokens + 3
// new tokens, so that a prefill and a whole speculative step run; its time is logged. Nothing
// where !setup.warmup.
Status run_warmup(model::DsaModel& model, const engine::EngineOptions& eo, const EngineSetup& setup,
                  const model::Tokenizer* tok);

}  // namespace dsa::cli
