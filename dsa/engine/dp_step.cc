#include "dsa/engine/dp_step.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/runtime/graph_runner.h"

namespace dsa::engine {

namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

// Every DP collective opens with its tag and the tag's negation: after the max-reduce the two
// agree only if every rank made the same kind of call, so a rank that skipped one collective and
// went on to the next is reported instead of its values pairing with another call's.
constexpr int64_t kAgreementTag = 0x53544550;  // "STEP"
constexpr int64_t kForwardTag = 0x46574421;    // "FWD!"

// The agreement vector: [tag, -tag, step, -step, any prefill, extend rows, decode B, chain B,
// load one-hot]. Everything is reduced with max; a value and its negation give the max and the
// min at once, and a load at this rank's index (0 elsewhere) gives every rank's load.
enum : size_t {
  kTag,
  kMinusTag,
  kStep,
  kMinusStep,
  kAnyPrefill,
  kExtendRows,
  kDecode,
  kChain,
  kLoads
};

Status check_tag(std::span<const int64_t> v, int64_t tag, int32_t rank, std::string_view what) {
  if (v[0] == tag && v[1] == -tag) return ok_status();
  return failed_precondition(fmt::format(
      "dp {}: rank {} made this collective while another rank made a different one (tags {:#x} "
      "and {:#x}): a rank skipped a collective or took a branch the others did not (SPEC.md §7)",
      what, rank, -v[1], v[0]));
}

Status validate_config(const DpStepConfig& c) {
  if (c.num_draft_tokens < 0 || c.num_draft_tokens > runtime::kMaxDraftTokens) {
    return invalid_argument(fmt::format("dp step: num_draft_tokens = {}: must be in [0, {}]",
                                        c.num_draft_tokens, runtime::kMaxDraftTokens));
  }
  if (c.max_requests < 1 || c.max_extend_rows < 1) {
    return invalid_argument(
        fmt::format("dp step: max_requests = {}, max_extend_rows = {}: both must be >= 1",
                    c.max_requests, c.max_extend_rows));
  }
  // An EXTEND step carries every decode request with n rows, so a rank must fit all of them.
  const int64_t carried = int64_t{c.max_requests} * (c.num_draft_tokens + 1);
  if (c.extend_carries_decodes && c.max_extend_rows < carried) {
    return invalid_argument(fmt::format(
        "dp step: max_extend_rows = {}: must be >= max_requests * (d + 1) = {} (an EXTEND step "
        "carries every decode request)",
        c.max_extend_rows, carried));
  }
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    if (c.buckets[i] < 1 || c.buckets[i] > c.max_requests ||
        (i > 0 && c.buckets[i] <= c.buckets[i - 1])) {
      return invalid_argument(
          fmt::format("dp step: buckets[{}] = {}: buckets must ascend within [1, {}]", i,
                      c.buckets[i], c.max_requests));
    }
  }
  return ok_status();
}

}  // namespace

Status validate(const StepProposal& p, const DpStepConfig& c) {
  DSA_RETURN_IF_ERROR(validate_config(c));
  auto bad = [](std::string_view field, int64_t value, std::string rule) {
    return invalid_argument(fmt::format("dp step proposal: {} = {}: {}", field, value, rule));
  };
  if (p.step < 0) return bad("step", p.step, "must be >= 0");
  if (p.load < 0) return bad("load", p.load, "must be >= 0");
  if (p.prefill_requests < 0) return bad("prefill_requests", p.prefill_requests, "must be >= 0");
  if (p.decode_requests < 0) return bad("decode_requests", p.decode_requests, "must be >= 0");
  if (p.prefill_requests + p.decode_requests > c.max_requests) {
    return bad("prefill_requests + decode_requests", p.prefill_requests + p.decode_requests,
               fmt::format("exceeds B_max = {}", c.max_requests));
  }
  const int64_t carried = int64_t{p.decode_requests} * (c.num_draft_tokens + 1);
  // Every chunk has at least one row; without chunks EXTEND would carry exactly the decodes.
  const int64_t least = carried + p.prefill_requests;
  if (p.extend_rows < least || (p.prefill_requests == 0 && p.extend_rows != carried)) {
    return bad("extend_rows", p.extend_rows,
               fmt::format("must be n * decode_requests = {} plus >= 1 per prefill request ({})",
                           carried, p.prefill_requests));
  }
  // T_ext bounds an EXTEND forward: one runs when a rank prefills, or when decodes ride in the
  // EXTEND (the merged step). A phased decode part runs DECODE / TARGET_VERIFY, not bounded by it.
  const bool runs_extend = p.prefill_requests > 0 || c.extend_carries_decodes;
  if (runs_extend && p.extend_rows > c.max_extend_rows) {
    return bad("extend_rows", p.extend_rows, fmt::format("exceeds T_ext = {}", c.max_extend_rows));
  }
  if (p.chain_requests < p.decode_requests ||
      p.chain_requests > p.decode_requests + p.prefill_requests) {
    return bad("chain_requests", p.chain_requests,
               fmt::format("must be in [decode_requests, decode_requests + prefill_requests] = "
                           "[{}, {}]",
                           p.decode_requests, p.decode_requests + p.prefill_requests));
  }
  return ok_status();
}

StatusOr<StepPlan> agree_step(dist::Collective& group, const StepProposal& p,
                              const DpStepConfig& c) {
  DSA_RETURN_IF_ERROR(validate(p, c));
  const int32_t world = group.world_size();
  std::vector<int64_t> v(kLoads + static_cast<size_t>(world), 0);
  v[kTag] = kAgreementTag;
  v[kMinusTag] = -kAgreementTag;
  v[kStep] = p.step;
  v[kMinusStep] = -p.step;
  v[kAnyPrefill] = p.prefill_requests > 0;
  v[kExtendRows] = p.extend_rows;
  v[kDecode] = p.decode_requests;
  v[kChain] = p.chain_requests;
  v[kLoads + static_cast<size_t>(group.rank())] = p.load;
  DSA_RETURN_IF_ERROR(group.all_reduce(v, dist::ReduceOp::kMax));
  DSA_RETURN_IF_ERROR(check_tag(v, kAgreementTag, group.rank(), "step agreement"));
  if (v[kStep] != -v[kMinusStep]) {
    return failed_precondition(fmt::format(
        "dp step: rank {} is at step {} but the ranks span steps [{}, {}]: a rank skipped or "
        "repeated a step (SPEC.md §7)",
        group.rank(), p.step, -v[kMinusStep], v[kStep]));
  }
  StepPlan plan;
  plan.loads.assign(v.begin() + kLoads, v.end());
  const int32_t d = c.num_draft_tokens;
  const auto bucket = [&](int64_t b) { return runtime::bucket_for(c.buckets, int32_t(b)); };
  if (v[kAnyPrefill] > 0) {
    plan.kind = StepKind::kExtend;
    plan.rows_pad = int32_t(v[kExtendRows]);
    plan.chain_pad = d > 1 && v[kChain] > 0 ? bucket(v[kChain]) : 0;
  } else if (v[kDecode] > 0) {
    plan.kind = StepKind::kUniform;
    plan.batch_pad = bucket(v[kDecode]);
    plan.chain_pad = d > 1 ? plan.batch_pad : 0;
  }
  return plan;
}

std::vector<ForwardShape> step_forwards(const StepPlan& plan, const DpStepConfig& c) {
  const int32_t d = c.num_draft_tokens, n = d + 1;
  std::vector<ForwardShape> out;
  switch (plan.kind) {
    case StepKind::kNone:
      return out;
    case StepKind::kUniform:
      // Verify samples every row (n per request); decode and draft-extend one row per request.
      out.push_back({ForwardRole::kTarget, 0, ModelKind::kTarget,
                     d == 0 ? ForwardMode::kDecode : ForwardMode::kTargetVerify, plan.batch_pad,
                     plan.batch_pad * n, n, plan.batch_pad * n});
      if (d > 0) {
        out.push_back({ForwardRole::kMtp, 0, ModelKind::kMtp, ForwardMode::kDraftExtend,
                       plan.batch_pad, plan.batch_pad * n, n, plan.batch_pad});
      }
      break;
    case StepKind::kExtend:
      out.push_back(
          {ForwardRole::kTarget, 0, ModelKind::kTarget, ForwardMode::kExtend, 0, plan.rows_pad, 0});
      if (d > 0) {
        out.push_back(
            {ForwardRole::kMtp, 0, ModelKind::kMtp, ForwardMode::kExtend, 0, plan.rows_pad, 0});
      }
      break;
  }
  for (int32_t s = 1; plan.chain_pad > 0 && s < d; ++s) {
    out.push_back({ForwardRole::kDraftChain, s, ModelKind::kMtp, ForwardMode::kDecode,
                   plan.chain_pad, plan.chain_pad, 1, plan.chain_pad});
  }
  return out;
}

StatusOr<runtime::ForwardBatch> make_batch(const ForwardShape& shape,
                                           std::vector<runtime::RequestInput> requests,
                                           int64_t forward_id) {
  runtime::ForwardBatch b;
  b.model = shape.model;
  b.forward_id = forward_id;
  const std::string_view mode = runtime::mode_name(shape.mode);
  if (shape.mode == ForwardMode::kExtend) {
    int64_t rows = 0;
    for (const runtime::RequestInput& q : requests) rows += q.new_len;
    if (rows > shape.rows_pad) {
      return invalid_argument(
          fmt::format("dp make_batch (extend): {} rows: more than the agreed rows_pad = {}", rows,
                      shape.rows_pad));
    }
    b.mode = ForwardMode::kExtend;
    b.rows_pad = shape.rows_pad;
  } else {
    if (int64_t(requests.size()) > shape.batch_pad) {
      return invalid_argument(
          fmt::format("dp make_batch ({}): {} requests: more than the agreed B_pad = {}", mode,
                      requests.size(), shape.batch_pad));
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].new_len != shape.rows_per_request) {
        return invalid_argument(
            fmt::format("dp make_batch ({}): requests[{}].new_len = {}: must be n = {}", mode, i,
                        requests[i].new_len, shape.rows_per_request));
      }
    }
    // A rank with nothing to run still runs the forward, on padding only (SPEC.md §4.5, §7).
    b.mode = requests.empty() ? ForwardMode::kIdle : shape.mode;
    b.idle_rows_per_request = shape.rows_per_request;
    b.batch_pad = shape.batch_pad;
  }
  b.requests = std::move(requests);
  return b;
}

ForwardShape shape_of(const runtime::MetadataHeader& h, ForwardRole role, int32_t chain_step) {
  const bool extend = h.mode == ForwardMode::kExtend;
  return {role,
          chain_step,
          h.model,
          extend ? ForwardMode::kExtend : runtime::graph_key(h).mode,
          extend ? 0 : h.batch_pad,
          h.rows_pad,
          extend ? 0 : h.rows_per_request,
          extend ? 0 : h.num_samples};
}

Status cross_check_forward(dist::Collective& group, const ForwardShape& s) {
  const int64_t fields[] = {int64_t(s.role), s.chain_step, int64_t(s.model),   int64_t(s.mode),
                            s.batch_pad,     s.rows_pad,   s.rows_per_request, s.samples};
  static constexpr const char* kNames[] = {
      "role",     "chain_step",       "model",  "mode", "batch_pad",
      "rows_pad", "rows_per_request", "samples"};
  constexpr size_t kFields = std::size(fields);
  // [tag, -tag, fields, -fields].
  std::vector<int64_t> v(2 + 2 * kFields);
  v[0] = kForwardTag;
  v[1] = -kForwardTag;
  for (size_t i = 0; i < kFields; ++i) {
    v[2 + i] = fields[i];
    v[2 + kFields + i] = -fields[i];
  }
  DSA_RETURN_IF_ERROR(group.all_reduce(v, dist::ReduceOp::kMax));
  DSA_RETURN_IF_ERROR(check_tag(v, kForwardTag, group.rank(), "forward cross-check"));
  for (size_t i = 0; i < kFields; ++i) {
    if (v[2 + i] != -v[2 + kFields + i]) {
      return failed_precondition(
          fmt::format("dp forward: ranks run different forwards: {} spans [{}, {}] (rank {}: {})",
                      kNames[i], -v[2 + kFields + i], v[2 + i], group.rank(), fields[i]));
    }
  }
  return ok_status();
}

}  // namespace dsa::engine
