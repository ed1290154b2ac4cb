// DP attention's step agreement (SPEC.md §7, docs/multi_gpu.md). Each rank schedules its own
// requests and proposes what it needs from the coming step; one all-reduce (max) over every
// rank's proposal decides the step for all of them: its kind (uniform decode / verify, or EXTEND
// when any rank has prompt work), the uniform B_pad (bucket >= the largest B, SPEC.md §5), the
// EXTEND row count and the draft chain's B_pad. The forwards of the step are a function of that
// agreed plan only (step_forwards), so every rank runs the same forwards with the same graph keys,
// an idle rank included: it fills each forward with no requests (all rows padded, §4.5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/forward_metadata.h"

namespace dsa::engine {

// The process-wide facts every rank shares (the same flags on every rank).
struct DpStepConfig {
  int32_t num_draft_tokens = 0;  // d; with d > 0 the model has an MTP layer
  std::vector<int32_t> buckets;  // CUDA-graph buckets, ascending (empty: B_pad = B)
  int32_t max_requests = 1;      // B_max per rank
  int32_t max_extend_rows = 1;   // T_ext per rank
  // true: an EXTEND step carries every decode request with n rows (the merged step), so T_ext
  // must hold B_max (d + 1) rows. false: the engine's phased steps (docs/multi_gpu.md) agree on
  // the prefill part and the decode part separately, and EXTEND carries prompt chunks only.
  bool extend_carries_decodes = true;
};

// What one rank needs from the coming step. If the step runs as EXTEND, every decode request
// rides in it with n = d + 1 rows (SPEC.md §4.1: it keeps the paged indexer path).
struct StepProposal {
  int64_t step = 0;              // this rank's step counter: ranks out of step are an error
  int32_t prefill_requests = 0;  // requests with a prompt chunk this step
  int32_t extend_rows = 0;       // rows as EXTEND: the chunks plus n per decode request
  int32_t decode_requests = 0;   // requests ready to decode (d = 0) or verify
  int32_t chain_requests = 0;    // requests drafted after the step: decode + completing prompts
  int64_t load = 0;              // outstanding tokens (placement, dp_placement.h)
};

enum class StepKind {
  kNone,     // no rank has work: no forward at all, on every rank
  kUniform,  // DECODE, or TARGET_VERIFY + DRAFT_EXTEND; every rank at B_pad
  kExtend,   // some rank has prompt work: EXTEND on every rank at rows_pad
};

struct StepPlan {
  StepKind kind = StepKind::kNone;
  int32_t batch_pad = 0;       // kUniform: bucket >= max B (max B itself above the largest bucket)
  int32_t rows_pad = 0;        // kExtend: the largest extend_rows
  int32_t chain_pad = 0;       // draft chain B_pad (d > 1); 0: no chain this step
  std::vector<int64_t> loads;  // [world_size] every rank's load, as proposed
};

// InvalidArgument naming the field for a proposal that is inconsistent or exceeds a capacity.
Status validate(const StepProposal& p, const DpStepConfig& config);

// One collective; every rank calls it once per step, idle or not.
StatusOr<StepPlan> agree_step(dist::Collective& group, const StepProposal& proposal,
                              const DpStepConfig& config);

// What each forward of a step is for, so a rank knows which of its requests go in.
enum class ForwardRole {
  kTarget,      // target DECODE / TARGET_VERIFY, or target EXTEND
  kMtp,         // MTP DRAFT_EXTEND, or MTP EXTEND (same rows as the target's)
  kDraftChain,  // MTP DECODE, chain_step 1..d-1
};

// The rank-invariant identity of a forward: what every rank must run identically.
struct ForwardShape {
  ForwardRole role = ForwardRole::kTarget;
  int32_t chain_step = 0;
  runtime::ModelKind model = runtime::ModelKind::kTarget;
  runtime::ForwardMode mode = runtime::ForwardMode::kDecode;  // never IDLE
  int32_t batch_pad = 0;         // uniform: B_pad; EXTEND: 0 (B or B + 1 differs per rank)
  int32_t rows_pad = 0;          // rows every rank runs (uniform B_pad * n)
  int32_t rows_per_request = 0;  // n; 0 in EXTEND
  // LM-head rows: uniform B_pad (DECODE, DRAFT_EXTEND) or B_pad * n (TARGET_VERIFY), padded
  // entries -1; EXTEND 0 (each rank samples its own rows; the LM head holds no collective).
  int32_t samples = 0;
  bool operator==(const ForwardShape&) const = default;
};

std::vector<ForwardShape> step_forwards(const StepPlan& plan, const DpStepConfig& config);

// This rank's batch for one forward: its requests, padded as the shape says; with no requests
// an IDLE forward (uniform) or an all-padding EXTEND. InvalidArgument when the requests do not
// fit the agreed shape (more than B_pad, more rows than rows_pad, a row count other than n).
StatusOr<runtime::ForwardBatch> make_batch(const ForwardShape& shape,
                                           std::vector<runtime::RequestInput> requests,
                                           int64_t forward_id);

// The shape a built forward has, read back from its header (IDLE maps to the mode it stands in
// for); equal to the ForwardShape it was built for, on every rank.
ForwardShape shape_of(const runtime::MetadataHeader& h, ForwardRole role, int32_t chain_step);

// Checks, in one collective, that every rank is about to run this same forward (the checked-mode
// guard before a forward's first MoE collective): FailedPrecondition naming the field otherwise.
Status cross_check_forward(dist::Collective& group, const ForwardShape& shape);

}  // namespace dsa::engine
