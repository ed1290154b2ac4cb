// The graph runner (SPEC.md §5; ARCHITECTURE.md's name for it): which uniform forwards have a CUDA
// graph — one per (model, mode, B_pad) for DECODE, TARGET_VERIFY and DRAFT_EXTEND — their capture
// at load, and per forward the lookup and replay. EXTEND and batches above the largest bucket run
// eagerly; an IDLE forward replays the graph of the step it stands in for (same model, n, B_pad).
// The runner knows nothing of layers: the model hands it a stage (all-padding inputs of a key into
// its fixed buffers) and a body (every launch of one forward).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/runtime/backend_control.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/forward_mode.h"

namespace dsa::runtime {

struct GraphKey {
  ModelKind model;
  ForwardMode mode;  // DECODE, TARGET_VERIFY or DRAFT_EXTEND
  int32_t batch_pad;
  auto operator<=>(const GraphKey&) const = default;
};

// SPEC.md §5's default bucket list up to b_max, with b_max itself as the last bucket.
std::vector<int32_t> default_buckets(int32_t b_max);
// The smallest bucket >= b; b itself above the largest (and with no buckets).
int32_t bucket_for(std::span<const int32_t> buckets, int32_t b);

// The graphs a model with d draft tokens replays: target DECODE (d = 0) or TARGET_VERIFY; with an
// MTP layer and d > 0, MTP DRAFT_EXTEND, and MTP DECODE for the draft chain when d > 1.
std::vector<GraphKey> graph_keys(int32_t num_draft_tokens, bool has_mtp,
                                 std::span<const int32_t> buckets);

// The key a forward with this header replays (IDLE maps to the step's mode by its n).
GraphKey graph_key(const MetadataHeader& h);

struct GraphStats {
  int32_t graphs = 0;
  size_t nodes = 0;
  double capture_s = 0;  // warm-up + capture of every graph
};

class GraphRunner {
 public:
  // Puts the all-padding inputs of a key where the body reads them (asynchronous copies allowed).
  using Stage = std::function<Status(const GraphKey&)>;
  // Every launch of one forward of `model`, reading only the backend buffers the stage wrote.
  using Body = std::function<Status(ModelKind model)>;

  // buckets: ascending, each in [1, max_requests] (InvalidArgument otherwise, see validate()).
  GraphRunner(kernels::Backend backend, std::vector<int32_t> buckets);

  // The option rules: graphs only on CUDA; buckets ascending within [1, max_requests].
  static Status validate(kernels::Backend backend, bool cuda_graphs,
                         std::span<const int32_t> buckets, int32_t max_requests);

  // B_pad for a uniform forward of b requests (b itself without buckets).
  int32_t batch_pad_for(int32_t b) const { return bucket_for(buckets_, b); }

  // SPEC.md §5: every key runs eagerly first (module loading, workspaces, scratch, the error
  // word), the device is synchronised, then each is captured over all-padding inputs — valid
  // because nothing in a graph depends on host-known lengths. The allocator is locked during
  // capture (cuda/device_memory.h), so a body that allocates fails the capture.
  Status capture(std::span<const GraphKey> keys, const Stage& stage, const Body& body);

  // The captured graph a forward with this header replays (nullptr: it runs eagerly).
  const ForwardGraph* find(const MetadataHeader& h) const;
  // Replays the forward's graph when it has one (true), else runs `eager` (false).
  StatusOr<bool> run(const MetadataHeader& h, const std::function<Status()>& eager) const;

  const GraphStats& stats() const { return stats_; }

 private:
  kernels::Backend backend_;
  std::vector<int32_t> buckets_;
  std::map<GraphKey, std::unique_ptr<ForwardGraph>> graphs_;
  GraphStats stats_;
};

}  // namespace dsa::runtime
