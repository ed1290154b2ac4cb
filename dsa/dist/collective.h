// The process group as the step logic sees it (docs/multi_gpu.md): this rank's index, the world
// size, and all-reduce over a few host int64 values — the DP step agreement (SPEC.md §7) and any
// other small host-visible plan. Device-buffer collectives (MoE dispatch / combine) are a separate,
// stream-ordered interface of the NCCL group; this one is host-side and synchronous by contract.
//
// Contract, for every implementation: every rank of the group makes the same sequence of calls,
// each with the same op and size. A rank that skips a call, or calls with another size, is a bug
// of the caller (SPEC.md §9 bug class 10); the in-process group reports it (LocalGroup), NCCL
// would hang, which is why the step agreement also cross-checks a step counter (engine/dp_step.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::dist {

enum class ReduceOp { kSum, kMax };

// Most int64 values one all_reduce may take on every group (NcclGroup stages them in buffers of
// this size; the step agreement needs 8 + world size). Callers with more split them into calls.
inline constexpr size_t kMaxAllReduceValues = 4096;

std::string_view reduce_op_name(ReduceOp op);

// Combines `a` into `acc` element-wise (the op's definition, shared by every implementation that
// reduces on the host). Sum is plain int64 addition: callers reduce token and request counts far
// below 2^62.
void reduce_into(std::span<int64_t> acc, std::span<const int64_t> a, ReduceOp op);

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // In place: afterwards every rank holds the element-wise op over all ranks' `values`. Blocks
  // until every rank has called. Errors: the group is broken (a rank timed out, sizes differed);
  // after an error every later call on every rank fails too — the ranks are no longer in step.
  virtual Status all_reduce(std::span<int64_t> values, ReduceOp op) = 0;
};

// World size 1: every reduction is the identity. What a single-GPU process runs.
class SoloCollective final : public Collective {
 public:
  int32_t rank() const override { return 0; }
  int32_t world_size() const override { return 1; }
  Status all_reduce(std::span<int64_t>, ReduceOp) override { return ok_status(); }
};

}  // namespace dsa::dist
