// The engine (SPEC.md §6): continuous batching over the model, chunked prefill, and lossless MTP
// speculative decoding (d draft tokens; d = 0 is plain decoding). One step is
//   [prefill: target EXTEND, MTP EXTEND, (d - 1) MTP DECODE for prompts that complete]
//   [decode:  TARGET_VERIFY (or DECODE when d = 0), acceptance, DRAFT_EXTEND, (d - 1) MTP DECODE]
// with every forward's metadata from the runtime's one builder. Rollback of rejected drafts is by
// length only (§6.4).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>

#include "dsa/core/status.h"
#include "dsa/engine/request.h"
#include "dsa/model/dsa_model.h"

namespace dsa::engine {

struct EngineOptions {
  int32_t prefill_chunk = 512;  // most prompt tokens one request prefills per step
  // Test hook (SPEC.md §6.6 oracle / adversarial drafters): may replace a request's drafts for
  // positions C + 1..C + d after the MTP layer proposed them.
  std::function<void(const RequestState&, std::vector<int32_t>& drafts)> draft_override;
  // Called with each request's newly emitted tokens (streaming).
  std::function<void(const RequestState&, std::span<const int32_t> tokens)> on_tokens;
};

struct EngineMetrics {
  int64_t steps = 0, verify_steps = 0, emitted = 0;
  std::vector<int64_t> accept_histogram;  // [d + 1]: steps with a = 0..d accepted drafts
  double mean_accept_length() const;
  // reach_j / reach_{j-1}: fraction of steps accepting draft j among those that accepted j - 1.
  std::vector<double> per_position_acceptance() const;
};

class Engine {
 public:
  Engine(model::DsaModel& model, EngineOptions options = {});

  int32_t num_draft_tokens() const { return d_; }

  // Queues a request; InvalidArgument for an empty prompt, max_new_tokens <= 0, a token outside the
  // vocabulary, bad sampling parameters, or a prompt + max_new_tokens beyond the context.
  StatusOr<int64_t> add_request(GenerationRequest req);

  // Admits what fits, then runs one prefill and one decode phase.
  Status step();
  bool has_work() const;
  // Steps until every request has finished.
  Status run_to_completion();

  const RequestState& request(int64_t id) const { return *requests_.at(id); }
  const EngineMetrics& metrics() const { return metrics_; }

 private:
  Status admit();
  Status prefill_phase();
  Status decode_phase();
  Status draft_chain(std::vector<RequestState*>& reqs, std::vector<int32_t> first_drafts,
                     std::vector<bf16> hidden, std::vector<int32_t> positions);
  void emit(RequestState& r, std::span<const int32_t> tokens);
  Status finish(RequestState& r);
  int32_t sample(const RequestState& r, const float* logits, int32_t position) const;
  // The MTP layer's top-1 draft from one row of logits (token 0 if no logit is above -inf).
  int32_t greedy_draft(const float* logits) const;
  Status run_forward(runtime::ForwardMode mode, runtime::ModelKind kind,
                     const std::vector<runtime::RequestInput>& reqs,
                     std::span<const int32_t> tokens, std::span<const bf16> hidden,
                     runtime::ForwardMetadata& meta, model::ForwardOutput* out);

  model::DsaModel& model_;
  EngineOptions options_;
  int32_t d_;
  int32_t vocab_;
  int32_t eos_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::unique_ptr<RequestState>> requests_;
  std::deque<RequestState*> waiting_;
  std::vector<RequestState*> running_;
  EngineMetrics metrics_;
  std::vector<int32_t> padded_tokens_;  // a padded forward's token rows (reused)
  std::vector<bf16> padded_hidden_;
};

}  // namespace dsa::engine
