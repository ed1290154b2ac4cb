#include "dsa/model/forward_graphs.h"

#include <algorithm>

namespace dsa::model {

using runtime::ForwardMode;
using runtime::ModelKind;

std::vector<int32_t> default_buckets(int32_t b_max) {
  static constexpr int32_t kSpecBuckets[] = {1,  2,  4,  8,   16,  24,  32,
                                             48, 64, 96, 128, 160, 192, 256};
  std::vector<int32_t> out;
  for (int32_t b : kSpecBuckets) {
    if (b < b_max) out.push_back(b);
  }
  if (b_max >= 1) out.push_back(b_max);
  return out;
}

int32_t bucket_for(std::span<const int32_t> buckets, int32_t b) {
  for (int32_t bucket : buckets) {
    if (bucket >= b) return bucket;
  }
  return b;
}

std::vector<GraphKey> graph_keys(int32_t d, bool has_mtp, std::span<const int32_t> buckets) {
  std::vector<GraphKey> keys;
  for (int32_t b : buckets) {
    keys.push_back(
        {ModelKind::kTarget, d == 0 ? ForwardMode::kDecode : ForwardMode::kTargetVerify, b});
    if (has_mtp && d > 0) keys.push_back({ModelKind::kMtp, ForwardMode::kDraftExtend, b});
    if (has_mtp && d > 1) keys.push_back({ModelKind::kMtp, ForwardMode::kDecode, b});
  }
  return keys;
}

GraphKey graph_key(const runtime::MetadataHeader& h) {
  ForwardMode mode = h.mode;
  switch (h.mode) {
    case ForwardMode::kIdle:
      // The uniform shape it stands in for: n = 1 is a DECODE, n = d + 1 the step's other forward.
      mode = h.rows_per_request == 1         ? ForwardMode::kDecode
             : h.model == ModelKind::kTarget ? ForwardMode::kTargetVerify
                                             : ForwardMode::kDraftExtend;
      break;
    case ForwardMode::kExtend:
    case ForwardMode::kDecode:
    case ForwardMode::kTargetVerify:
    case ForwardMode::kDraftExtend:
      break;
  }
  return {h.model, mode, h.batch_pad};
}

void ForwardGraphs::add(const GraphKey& key, std::unique_ptr<runtime::ForwardGraph> graph) {
  graphs_[key] = std::move(graph);
}

const runtime::ForwardGraph* ForwardGraphs::find(const GraphKey& key) const {
  auto it = graphs_.find(key);
  return it == graphs_.end() ? nullptr : it->second.get();
}

size_t ForwardGraphs::total_nodes() const {
  size_t n = 0;
  for (const auto& [key, g] : graphs_) n += g->num_nodes();
  return n;
}

}  // namespace dsa::model
