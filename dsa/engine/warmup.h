// The warm-up run of a serving process (SGLang's server warm-up request, vLLM's profile run): one
// short request taken through the engine to completion before the requests that are timed, so
// the first launches of what the graphs captured at load do not cover (the prefill's kernels,
// the speculative step's ops outside the graphs; their module loads and library plans) land here
// and not in the first request's TTFT. On the tiny model the first prefill of a run took 13-44
// ms, varying 2x between runs of the same binary (bench/RESULTS.md, stop 49).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"

namespace dsa::engine {

// Runs `prompt` (token ids, at least one) greedily for `new_tokens` tokens (EOS ignored) on a
// throwaway engine over `model` with `options` (its callbacks and draft override dropped), then
// starts the model's measurements over (DsaModel::reset_measurements). The request's pages are
// released when it finishes; its tokens are dropped. InvalidArgument naming the field for an empty
// prompt or new_tokens < 1; the request's own error if it fails.
Status warm_up(model::DsaModel& model, EngineOptions options, std::vector<int32_t> prompt,
               int32_t new_tokens);

}  // namespace dsa::engine
