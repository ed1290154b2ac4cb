#include "dsa/runtime/graph_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dsa/runtime/backend_memory.h"

namespace dsa::runtime {

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

GraphKey graph_key(const MetadataHeader& h) {
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

GraphRunner::GraphRunner(kernels::Backend backend, std::vector<int32_t> buckets)
    : backend_(backend), buckets_(std::move(buckets)) {}

Status GraphRunner::validate(kernels::Backend backend, bool cuda_graphs,
                             std::span<const int32_t> buckets, int32_t max_requests) {
  if (cuda_graphs && backend != kernels::Backend::kCuda) {
    return invalid_argument("cuda_graphs: the CPU backend has no graphs");
  }
  for (int32_t b : buckets) {
    if (b < 1 || b > max_requests) {
      return invalid_argument(
          fmt::format("buckets: {} is outside [1, max_requests = {}]", b, max_requests));
    }
  }
  if (!std::is_sorted(buckets.begin(), buckets.end())) {
    return invalid_argument("buckets: must be ascending");
  }
  return ok_status();
}

Status GraphRunner::capture(std::span<const GraphKey> keys, const Stage& stage, const Body& body) {
  const auto t0 = std::chrono::steady_clock::now();
  const MemoryOps& mem = memory_ops(backend_);
  for (const GraphKey& k : keys) {  // warm-up
    DeferDeviceErrors defer(backend_);
    DSA_RETURN_IF_ERROR(stage(k));
    DSA_RETURN_IF_ERROR(body(k.model));
    DSA_RETURN_IF_ERROR(mem.sync());
  }
  DSA_RETURN_IF_ERROR(take_device_errors(backend_, "graph warm-up"));
  for (const GraphKey& k : keys) {
    DSA_RETURN_IF_ERROR(stage(k));
    DSA_RETURN_IF_ERROR(mem.sync());  // the staging block is read before the next key
    auto graph = capture_forward_graph(backend_, [&] { return body(k.model); });
    if (!graph.ok()) {
      return graph.status().with_context(fmt::format(
          "capturing {} {} B_pad = {}", model_name(k.model), mode_name(k.mode), k.batch_pad));
    }
    graphs_[k] = std::move(*graph);
  }
  stats_.graphs = int32_t(graphs_.size());
  stats_.nodes = 0;
  for (const auto& [key, g] : graphs_) stats_.nodes += g->num_nodes();
  stats_.capture_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

const ForwardGraph* GraphRunner::find(const MetadataHeader& h) const {
  if (!is_uniform(h.mode)) return nullptr;
  auto it = graphs_.find(graph_key(h));
  return it == graphs_.end() ? nullptr : it->second.get();
}

StatusOr<bool> GraphRunner::run(const MetadataHeader& h,
                                const std::function<Status()>& eager) const {
  if (const ForwardGraph* graph = find(h)) {
    DSA_RETURN_IF_ERROR(graph->replay());
    return true;
  }
  DSA_RETURN_IF_ERROR(eager());
  return false;
}

}  // namespace dsa::runtime
