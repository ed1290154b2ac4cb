// CUDA graphs of the uniform forwards (SPEC.md §5): one per (model, mode, B_pad) for DECODE,
// TARGET_VERIFY and DRAFT_EXTEND, captured once at start-up and replayed with the step's metadata
// written in place. EXTEND and batches above the largest bucket run eagerly; an IDLE forward
// replays the graph of the step it stands in for (same model, n and B_pad).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "dsa/runtime/backend_control.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/forward_mode.h"

namespace dsa::model {

struct GraphKey {
  runtime::ModelKind model;
  runtime::ForwardMode mode;  // DECODE, TARGET_VERIFY or DRAFT_EXTEND
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
GraphKey graph_key(const runtime::MetadataHeader& h);

class ForwardGraphs {
 public:
  void add(const GraphKey& key, std::unique_ptr<runtime::ForwardGraph> graph);
  const runtime::ForwardGraph* find(const GraphKey& key) const;
  int32_t size() const { return int32_t(graphs_.size()); }
  size_t total_nodes() const;

 private:
  std::map<GraphKey, std::unique_ptr<runtime::ForwardGraph>> graphs_;
};

}  // namespace dsa::model
