// The overlapped d = 0 decode (EngineOptions::overlap; SPEC.md §6.7 with F = 1, SGLang's overlap
// scheduler). Step N launches its DECODE and the sampling of its rows on the backend and returns
// without waiting; step N + 1 launches the next DECODE, whose input token for a request of step N
// is gathered from step N's sampled tokens in backend memory, and only then reads step N's tokens
// (a wait on a marker behind their copy, not on the stream: step N + 1 keeps the GPU busy while
// the host emits, decodes text and matches stop strings). So the host's work for a step is no
// longer on the GPU's critical path.
//
// What the host does not know when it launches step N + 1 is only the token values: lengths and
// positions advance by one per step whatever the token, so the metadata is built by the host
// builder as always, and every page a launch writes was reserved at admission (the whole life
// of the request, scheduler.h: bug class 12 cannot occur). Count-based stops (max_new_tokens, the
// context) are known at launch and never launch a token too many (decode_requests); EOS, stop ids
// and stop strings are known only when read, so a request that stopped at step N was launched
// once more in step N + 1: that row's KV write and token are discarded, and the request keeps its
// pages until that launch is read (Scheduler::retire_finished).
#include <fmt/format.h>

#include "dsa/engine/engine.h"

namespace dsa::engine {

Status Engine::overlapped_decode(const std::vector<RequestState*>& reqs,
                                 const ForwardShape& shape) {
  const int64_t launch = metrics_.overlapped_launches++;
  std::vector<runtime::RequestInput> inputs;
  std::vector<int32_t> tokens, token_rows;
  std::vector<SamplingParams> params;
  std::vector<int32_t> positions;
  bool gathered = false;
  for (RequestState* r : reqs) {
    inputs.push_back({r->req_slot, r->committed, 1, 0, 1});
    if (r->pending_row >= 0) {
      // Only the launch in flight can hold it: every earlier one has been read.
      if (!in_flight_ || r->pending_launch != in_flight_->launch) {
        return internal_error(
            fmt::format("engine: request {}'s pending token is in launch {}, not the one in flight",
                        r->id, r->pending_launch));
      }
      tokens.push_back(0);  // replaced on the backend
      token_rows.push_back(r->pending_row);
      gathered = true;
    } else {
      tokens.push_back(r->pending);
      token_rows.push_back(-1);
    }
    params.push_back(r->req.sampling);
    positions.push_back(r->committed + 1);
  }
  model::ForwardInputs in;
  in.tokens = tokens;
  if (gathered) in.token_rows = token_rows;
  model::ForwardOutput out;
  DSA_RETURN_IF_ERROR(run_forward(shape, inputs, in, &out,
                                  model::ForwardOutputs{false, model::LogitsTo::kBackend}));
  DSA_ASSIGN_OR_RETURN(model::SampleTicket ticket,
                       model_.sample_async(sampleable_, params, positions));
  InFlightDecode next{ticket, {}, launch, std::nullopt};
  for (size_t b = 0; b < reqs.size(); ++b) {
    RequestState& r = *reqs[b];
    r.committed += 1;  // the KV of x_C is written by this launch
    r.in_flight += 1;
    r.pending = -1;
    r.pending_launch = launch;
    r.pending_row = int32_t(b);
    next.ids.push_back(r.id);
  }
  // The previous launch's tokens, read while this one runs.
  DSA_RETURN_IF_ERROR(finish_in_flight());
  in_flight_ = std::move(next);
  return ok_status();
}

Status Engine::finish_in_flight() {
  if (!in_flight_) return ok_status();
  const InFlightDecode done = std::move(*in_flight_);
  in_flight_.reset();
  if (done.accept) return finish_speculative(done);
  std::vector<int32_t> tokens;
  DSA_RETURN_IF_ERROR(model_.collect_sampled(done.ticket, &tokens));
  if (tokens.size() != done.ids.size()) {
    return internal_error(fmt::format("engine: launch {} sampled {} tokens for {} requests",
                                      done.launch, tokens.size(), done.ids.size()));
  }
  for (size_t b = 0; b < done.ids.size(); ++b) {
    RequestState* r = scheduler_.find(done.ids[b]);
    if (r == nullptr) continue;  // aborted and released meanwhile
    r->in_flight -= 1;
    const int32_t y = tokens[b];
    if (r->pending_launch == done.launch) {  // no later launch consumed it: the host holds it
      r->pending = y;
      r->pending_launch = -1;
      r->pending_row = -1;
    }
    // Stopped by an earlier token of this request (or aborted): this one is discarded.
    if (r->finish != FinishReason::kNone) continue;
    emit(*r, std::span<const int32_t>(&y, 1));
  }
  return ok_status();
}

}  // namespace dsa::engine
