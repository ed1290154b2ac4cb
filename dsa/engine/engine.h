// The engine (SPEC.md §6): continuous batching over the model, chunked prefill, and lossless MTP
// speculative decoding (d draft tokens; d = 0 is plain decoding). One step is
//   schedule — the scheduler admits what fits (scheduler.h);
//   run      — prefill phase: target EXTEND, MTP EXTEND, (d - 1) MTP DECODE for prompts that
//              complete (prefill_phase.cc); decode phase: TARGET_VERIFY (or DECODE when d = 0),
//              acceptance, DRAFT_EXTEND, (d - 1) MTP DECODE (decode_phase.cc, draft_chain.cc);
//   collect  — finished requests leave, their pages freed and their figures recorded.
// Every forward is a runtime::ForwardBatch the model turns into metadata with the runtime's one
// builder. Rollback of rejected drafts is by length only (§6.4).
//
// Each phase's forwards are the ones a step plan names (dp_step.h): the phase proposes what it
// needs, the ranks agree (one all-reduce), and the phase runs exactly step_forwards(plan), filled
// with this rank's requests — none on an idle rank, whose forwards are then all padding (§4.5).
// Without a collective the engine is the world-size-1 case of the same code (SoloCollective): the
// plan's B_pad is the bucket of its own B, so its forwards are the ones it always ran.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/engine/acceptance.h"
#include "dsa/engine/dp_step.h"
#include "dsa/engine/engine_metrics.h"
#include "dsa/engine/request.h"
#include "dsa/engine/scheduler.h"
#include "dsa/model/dsa_model.h"

namespace dsa::engine {

enum class AcceptOn { kAuto, kBackend, kHost };

struct EngineOptions {
  int32_t prefill_chunk = 512;  // most prompt tokens one request prefills per step, >= 1
  // Decodes outputs as they are emitted (RequestState::text) and matches stop strings; nullptr =
  // token ids only (requests with stop strings are then refused).
  const model::Tokenizer* tokenizer = nullptr;
  // Test hook (SPEC.md §6.6 oracle / adversarial drafters): may replace a request's drafts for
  // positions C + 1..C + d after the MTP layer proposed them.
  std::function<void(const RequestState&, std::vector<int32_t>& drafts)> draft_override;
  // Benchmarks (simulated_acceptance.h): > 0 forces the number of accepted drafts per request and
  // step to a draw with this mean accept length, in [1, d + 1]; 0 = real acceptance.
  double simulate_accept_length = 0;
  // Where the sampled rows of every forward are decided: the target's tokens (d = 0 decode, the
  // first token after a prompt), the verify's acceptance (simulated or not) and the MTP layer's
  // greedy drafts. kBackend: the op table's accept_drafts (d = 0 for plain sampling and drafts)
  // over the logits left in the backend's memory, so on a device only accept counts and tokens
  // reach the host; kHost: the logits are copied and the host rules run (the same tokens: the op's
  // reference is the host rule). kAuto: kBackend on a device backend, except the target rows of
  // a step where a request filters by top-k or top-p (the device filters cost milliseconds at
  // V3.2's vocabulary, bench/RESULTS.md); kHost on the CPU backend.
  AcceptOn accept_on = AcceptOn::kAuto;
  // Tests: hand the MTP layer's hidden rows from forward to forward through host vectors (each
  // forward's hidden states copied back), the path before the device hand-off. By default they
  // stay in backend memory (model::ForwardInputs), and where the drafts are decided on the backend
  // so are the chain's tokens: the draft chain then reads back only its d drafts, once, at its
  // end. The same tokens and drafts either way.
  bool host_handoff = false;
  // Called with each request's newly emitted tokens (streaming).
  std::function<void(const RequestState&, std::span<const int32_t> tokens)> on_tokens;
  // Called once per request when it finishes (successfully or with its own error), in the step
  // it finishes, after its pages are freed: results can be written as they come.
  std::function<void(const RequestState&)> on_finish;
  // Keeps a record of every forward run (forward_trace()); tests compare it across DP ranks.
  bool record_forwards = false;
  // DP checked mode: before each forward every rank all-reduces its shape (cross_check_forward),
  // so a rank about to run another forward is reported instead of pairing collectives wrongly.
  bool check_forwards = false;
  // The overlapped decode (SPEC.md §6.7 F = 1, SGLang's overlap scheduler): a d = 0 decode step
  // whose tokens are sampled on the backend (accept_on) is launched before the previous step's
  // tokens are read: its input tokens are the previous step's, gathered in backend memory, and
  // the host reads step N's tokens (emits them, finds EOS and stop strings) while step N + 1 runs
  // on the device. Work launched for a request that turns out to have finished is discarded.
  // Tokens are the same as without it; each is emitted one step later. With d > 0 and the step
  // committed on the device (device_commit), the same for a speculative step over the same
  // requests as the one in flight: it is built as if that step accepted nothing and moved by its
  // counts on the backend (device_commit.cc). false: every step reads its tokens before the next
  // is launched (`--disable-overlap-schedule`).
  bool overlap = true;
  // The step commit (SPEC.md §6.7, docs/device_committed_step.md): a speculative step whose
  // acceptance and drafts are decided on the backend (not simulated, no host hand-off, no
  // draft_override) launches its acceptance and builds the draft extend and the draft chain as if
  // nothing was accepted; the step commit op moves them to the accepted counts on the backend, so
  // the step's forwards run back to back and the host reads once, at the end of the step. The
  // same tokens either way. false: the acceptance is read before the draft extend is built.
  bool device_commit = true;
};

// One forward as it ran on this rank: its rank-invariant shape (the same on every rank) and how
// many of this rank's requests it carried (0: all padding).
struct ForwardRecord {
  int64_t step = 0;
  ForwardShape shape;
  int32_t requests = 0;
};

// InvalidArgument naming the field for options the engine cannot honour.
Status validate(const EngineOptions& o);

class Engine {
 public:
  // group: the DP group this engine is one rank of (docs/multi_gpu.md); it must outlive the
  // engine, and every rank must call step() the same number of times (an idle rank included).
  // nullptr = a single rank.
  Engine(model::DsaModel& model, EngineOptions options = {}, dist::Collective* group = nullptr);

  int32_t num_draft_tokens() const { return d_; }

  // Queues a request; InvalidArgument for an empty prompt, max_new_tokens <= 0, a token outside the
  // vocabulary, bad sampling parameters, or a prompt + max_new_tokens beyond the context.
  StatusOr<int64_t> add_request(GenerationRequest req);

  // Schedule, run the prefill and decode phases, collect the finished requests. A request that
  // fails alone (cannot fit, cannot be decoded) finishes with kError; an error returned here
  // (bad options, a failed forward) concerns the whole batch. Every OK step makes progress.
  Status step();
  bool has_work() const { return scheduler_.has_work(); }
  // Steps until every request has finished.
  Status run_to_completion();

  // Finishes a waiting or running request now (FinishReason::kAborted): its pages are freed and
  // on_finish is called before this returns; the other requests go on unaffected. Call it between
  // steps (the engine is single-threaded). A request in an overlapped decode still in flight waits
  // for that decode to be read first (its tokens, the aborted request's included, are emitted).
  // NotFound / FailedPrecondition as Scheduler::abort.
  Status abort(int64_t id);
  size_t num_running() const { return scheduler_.running().size(); }
  size_t num_waiting() const { return scheduler_.num_waiting(); }

  // A request added and not yet released (a caller's bug otherwise: find() is the checked form).
  const RequestState& request(int64_t id) const { return scheduler_.request(id); }
  const RequestState* find(int64_t id) const { return scheduler_.find(id); }
  // Forgets a finished request (after its results were read).
  Status release(int64_t id) { return scheduler_.release(id); }
  const EngineMetrics& metrics() const { return metrics_; }
  // Outstanding tokens of the waiting and running requests (prompt tokens still to prefill plus
  // new tokens they may still emit): the load that places requests (dp_placement.h).
  int64_t load() const;
  const std::vector<ForwardRecord>& forward_trace() const { return trace_; }
  dist::Collective& group() { return *group_; }

 private:
  Status prefill_phase(const std::vector<RequestState*>& running);
  Status decode_phase(const std::vector<RequestState*>& running);
  // The requests of `running` a decode step takes now: decoding, not finished, and with tokens
  // left to sample after the ones in flight.
  std::vector<RequestState*> decode_requests(const std::vector<RequestState*>& running) const;
  // The overlapped d = 0 decode (EngineOptions::overlap): launches `shape` over reqs with the
  // sampling on the backend, then reads the previous launch's tokens (overlapped_decode.cc).
  Status overlapped_decode(const std::vector<RequestState*>& reqs, const ForwardShape& shape);
  // Reads the launched decode's tokens, if one is in flight, and emits them (requests that
  // finished meanwhile drop theirs).
  Status finish_in_flight();
  // Reads the drafts that requests of `running` keep in the model's draft slots
  // (RequestState::drafts_row) into their `drafts`: before anything that needs them on the host
  // or writes the slots again (a prefill part's chain).
  Status read_kept_drafts(const std::vector<RequestState*>& running);
  // The d - 1 MTP DECODEs the plan names (`chain`: its kDraftChain forwards; none when empty),
  // after the MTP forward `first` (the model's last) whose first reqs.size() sampled rows give
  // the first drafts; rows[b]: request b's row of `first` (its hidden state pairs with that
  // draft). Sets every request's d drafts.
  // patched: the chain is built at a = 0 and committed on the backend (device_committed_step).
  Status draft_chain(const std::vector<RequestState*>& reqs, const model::ForwardOutput& first,
                     const std::vector<int32_t>& rows, std::vector<int32_t> committed,
                     std::span<const ForwardShape> chain, bool patched = false,
                     bool shifted = false);
  // The rest of a speculative step after its verify (target, the model's last forward), committed
  // on the device (EngineOptions::device_commit): acceptance launched, the draft extend and chain
  // built at a = 0 and patched on the backend, then the one read of the counts and tokens, emitted
  // here. inputs: the verify's requests; draft_rows: where each keeps its drafts (or empty).
  // overlap: the step is left in flight (EngineOptions::overlap), read by the next one;
  // shifted: the step before it is still in flight, so every forward of this one was built at
  // committed + 1 and moves by that step's counts on the backend (the verify included).
  Status device_committed_step(const std::vector<RequestState*>& reqs,
                               std::span<const ForwardShape> plan,
                               const model::ForwardOutput& target,
                               std::vector<runtime::RequestInput> inputs,
                               std::span<const int32_t> draft_rows, bool overlap, bool shifted);
  // Whether the speculative step over `reqs` may be launched before the one in flight is read:
  // the same requests in the same order, their drafts kept where that step's chain left them.
  bool shifts_in_flight(const std::vector<RequestState*>& reqs) const;
  // The commit of a speculative step's counts and tokens on the host (every path: host rules,
  // read first, collected): accept statistics, committed length, the pending token, emission.
  void commit_on_host(RequestState& r, const AcceptResult& acc);
  // Whether a speculative step over requests decided on the backend commits on the device.
  bool commits_on_device() const;
  // Launches the backend acceptance of the last verify over `reqs` (accept_on_backend's launch).
  Status launch_acceptance(const std::vector<RequestState*>& reqs,
                           std::span<const int32_t> draft_rows, bool shifted = false);
  // One emitted AcceptResult per request from the acceptance's read.
  std::vector<AcceptResult> accept_results(const model::VerifyAcceptance& v) const;
  // Agrees on one phase's plan with the other ranks (every rank calls it at the same point).
  StatusOr<std::vector<ForwardShape>> agree(const StepProposal& proposal);
  void emit(RequestState& r, std::span<const int32_t> tokens);
  std::optional<size_t> find_stop(const RequestState& r, size_t before) const;
  void fail(RequestState& r, Status why);
  void mask_padding_logits(std::vector<float>& logits) const;
  // The MTP layer's top-1 draft from one row of logits (token 0 if no logit is above -inf).
  int32_t greedy_draft(const float* logits) const;
  // The planned forward `shape` over this rank's requests (none: all padding), at the agreed
  // B_pad / rows_pad; Internal if the model ran another shape than the one agreed.
  // `what` comes back to the host (model::ForwardOutputs: nothing = launched only).
  Status run_forward(const ForwardShape& shape, std::vector<runtime::RequestInput> reqs,
                     const model::ForwardInputs& in, model::ForwardOutput* out,
                     model::ForwardOutputs what);
  // An MTP forward's hidden input: the previous forward's rows `rows` in backend memory, or, with
  // host_handoff, those rows of `prev` (its hidden states on the host).
  model::ForwardInputs mtp_inputs(const model::ForwardOutput& prev,
                                  const std::vector<int32_t>& rows,
                                  std::vector<bf16>* host_rows) const;
  // The DRAFT_EXTEND's inputs after the verify `target` (every verify row in place, SPEC.md §6.7):
  // `tokens`, those listed in `token_rows` gathered from the draft slots when any_kept. `out`
  // owns what its `in` points at.
  struct DraftExtendInputs {
    std::vector<int32_t> rows;
    std::vector<bf16> host_rows;
    model::ForwardInputs in;
  };
  void draft_extend_inputs(const model::ForwardOutput& target, const ForwardShape& shape,
                           std::span<const int32_t> tokens, std::span<const int32_t> token_rows,
                           bool any_kept, DraftExtendInputs* out) const;
  // What a forward must bring back: its hidden states if an MTP forward takes them from the host
  // (host_handoff and `feeds_mtp`), its logits unless they are decided on the backend.
  model::ForwardOutputs outputs(bool feeds_mtp, bool on_backend) const {
    return {options_.host_handoff && feeds_mtp, logits_to(on_backend)};
  }
  // Acceptance of a verify forward's drafts on the model's backend (kBackend logits): per request
  // of `reqs`, in order, the same AcceptResult as the host rule accept_drafts. draft_rows (empty
  // or one per request): where the request keeps its drafts in the draft slots (-1: its drafts).
  StatusOr<std::vector<AcceptResult>> accept_on_backend(const std::vector<RequestState*>& reqs,
                                                        std::span<const int32_t> draft_rows = {});
  // Whether the target rows of a step over `reqs` are decided on the backend (accept_on).
  bool target_on_backend(const std::vector<RequestState*>& reqs) const;
  // Whether the MTP layer's greedy drafts are (accept_on; kAuto: on any device backend).
  bool drafts_on_backend() const;
  static model::LogitsTo logits_to(bool on_backend) {
    return on_backend ? model::LogitsTo::kBackend : model::LogitsTo::kHost;
  }
  // Tokens of forward `out`'s first params.size() sampled rows, row i sampled with params[i] at
  // position positions[i]: on the backend (the op table's accept_drafts at d = 0 over the logits
  // left in its memory; `out` must be the model's last forward) or by the host sampler on
  // out.logits — the same tokens.
  StatusOr<std::vector<int32_t>> sampled_tokens(const model::ForwardOutput& out, bool on_backend,
                                                std::span<const SamplingParams> params,
                                                std::span<const int32_t> positions);
  // The MTP layer's top-1 drafts of `out`'s first `count` sampled rows on the host logits
  // (greedy_draft's rule: token 0 if no logit is above -inf).
  std::vector<int32_t> drafts_of(const model::ForwardOutput& out, size_t count) const;

  model::DsaModel& model_;
  EngineOptions options_;
  int32_t d_;
  int32_t vocab_;
  // Ids [0, sampleable_) may be sampled; the rest of the vocabulary is padding.
  int32_t sampleable_;
  // config.json's eos_token_id, one id or each of a list (GLM-5 has three): any of them ends a
  // request, as in SGLang and vLLM.
  std::vector<int32_t> eos_;
  Status options_status_;
  int64_t prefilled_ = 0;  // prompt tokens prefilled so far (the progress guard)
  Scheduler scheduler_;
  EngineMetrics metrics_;
  dist::SoloCollective solo_;
  dist::Collective* group_;  // the DP group, or solo_
  DpStepConfig dp_config_;
  int64_t forwards_ = 0;  // forward ids
  std::vector<ForwardRecord> trace_;
  // The overlapped decode launched and not yet read: its sampling and its requests by id (a
  // request may be aborted and released meanwhile); launch ids count from 0
  // (EngineMetrics::overlapped_launches before it).
  // A speculative step (d > 0) in flight holds its acceptance's ticket instead (`accept`).
  struct InFlightDecode {
    model::SampleTicket ticket;
    std::vector<int64_t> ids;
    int64_t launch = 0;
    std::optional<model::AcceptTicket> accept;
  };
  std::optional<InFlightDecode> in_flight_;
  // Collects the speculative step in flight `done` and commits it on the host.
  Status finish_speculative(const InFlightDecode& done);
};

}  // namespace dsa::engine
