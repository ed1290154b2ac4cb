// The figures the engine reports (the CLI and, later, the server print them; nothing recomputes
// them): per request its latencies and accept lengths, per engine the totals and the latencies of
// every finished request.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/engine/accept_stats.h"
#include "dsa/engine/request.h"

namespace dsa::engine {

struct RequestFigures {
  double ttft_s = 0;        // arrival to the first emitted token
  double e2e_s = 0;         // arrival to finish
  double tpot_s = 0;        // first token to finish, per output token after the first
  double tokens_per_s = 0;  // output tokens / e2e_s
  double accept_length_mean = 1;
  std::vector<double> per_position_acceptance;  // [d]
  std::vector<int64_t> accept_histogram;        // [d + 1]: steps with a = 0..d
};

// The figures of a finished request of an engine with d = num_draft_tokens.
RequestFigures request_figures(const RequestState& r, int32_t num_draft_tokens);

struct EngineMetrics {
  explicit EngineMetrics(int32_t num_draft_tokens = 0) : accept(num_draft_tokens) {}

  int64_t steps = 0, verify_steps = 0, emitted = 0;
  // Sampled rows whose logits were copied to the host (the host sampler, drafter or acceptance
  // rule read them); rows decided on the model's backend return only their tokens.
  int64_t host_logit_rows = 0;
  // Device-to-host reads of data by the model during steps (its ForwardTiming's counters, per
  // engine): copies and bytes. On the backend path of a speculative step only counts and tokens.
  int64_t readbacks = 0, readback_bytes = 0;
  // Host-to-backend bytes of the forwards' inputs (model::ForwardTiming::staged_bytes).
  int64_t staged_bytes = 0;
  // Overlapped decodes (EngineOptions::overlap) launched.
  int64_t overlapped_launches = 0;
  // Speculative steps committed on the device (EngineOptions::device_commit): their forwards ran
  // back to back with one read at the end.
  int64_t device_commits = 0;
  // Of those, the ones launched before the previous one was read (EngineOptions::overlap with
  // d > 0): built as if it accepted nothing and moved by its counts on the backend.
  int64_t shifted_steps = 0;
  // Host time of the engine's own parts of a step (steady_clock, always on; summed over DP ranks):
  // schedule = admission; accept = acceptance bookkeeping (the host rule where it runs, the next
  // forwards' token rows, lengths); emit = appending tokens, detokenising, stop checks and the
  // on_tokens callback; retire = finishing requests and on_finish; total = the whole step. The
  // model's forwards and reads are in its ForwardTiming; total less both is the rest.
  struct StepTimes {
    double schedule_s = 0, accept_s = 0, emit_s = 0, retire_s = 0, total_s = 0;
  };
  StepTimes times;
  AcceptStats accept;                  // every speculative step of every request
  std::vector<double> ttft_s, tpot_s;  // one entry per finished request, in finishing order

  // Adds another DP rank's figures (the same d): emitted tokens, verify steps, acceptance and
  // latencies add up; steps is the larger count, since the ranks step together (each rank's
  // steps are the group's steps, not a share of them).
  void merge_rank(const EngineMetrics& other);

  double mean_accept_length() const { return accept.mean_accept_length(); }
  std::vector<double> per_position_acceptance() const { return accept.per_position_acceptance(); }
  double mean_ttft_s() const;
  double mean_tpot_s() const;
};

}  // namespace dsa::engine
