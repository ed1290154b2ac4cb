#include "dsa/cli/generate_dp.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "dsa/engine/dp_engine_group.h"

namespace dsa::cli {

namespace {

std::string bytes(double b) {
  return b >= double(1ull << 30) ? fmt::format("{:.2f} GiB", b / double(1ull << 30))
                                 : fmt::format("{:.1f} MiB", b / double(1ull << 20));
}

}  // namespace

std::string describe_dp_memory(const std::vector<std::unique_ptr<model::DsaModel>>& models) {
  const model::CachePlan& c = models.at(0)->cache_plan();
  const double one = double(c.weight_bytes + c.pool_bytes() + c.output_bytes);
  return fmt::format(
      "--dp-size {0}: {0} model instances of the same weights on the CPU, {0} x {1} (weights {2}, "
      "KV cache {3}, outputs {4}) = {5}",
      models.size(), bytes(one), bytes(double(c.weight_bytes)), bytes(double(c.pool_bytes())),
      bytes(double(c.output_bytes)), bytes(one * double(models.size())));
}

StatusOr<DpRunResult> run_dp(const std::vector<std::unique_ptr<model::DsaModel>>& models,
                             const engine::EngineOptions& options,
                             std::vector<engine::GenerationRequest> requests,
                             GenerateReport& report, const std::function<bool()>& stop) {
  std::vector<model::DsaModel*> ranks;
  for (const auto& m : models) ranks.push_back(m.get());
  DSA_ASSIGN_OR_RETURN(std::unique_ptr<engine::DpEngineGroup> group,
                       engine::DpEngineGroup::create(ranks, options, engine::kDpWatchdog));
  DpRunResult out;
  out.dp.world_size = group->world_size();
  out.dp.requests.assign(size_t(group->world_size()), 0);
  std::vector<std::optional<engine::DpRequestId>> placed(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    StatusOr<engine::DpRequestId> id = group->add_request(std::move(requests[i]));
    if (!id.ok()) {
      report.refused(i, id.status());
      continue;
    }
    placed[i] = *id;
    ++out.dp.requests[size_t(id->rank)];
  }
  report.start();
  DSA_RETURN_IF_ERROR(group->run_to_completion(stop));
  for (size_t i = 0; i < placed.size(); ++i) {
    if (!placed[i]) continue;
    const engine::RequestState& r = group->engine(placed[i]->rank).request(placed[i]->id);
    if (r.finish != engine::FinishReason::kNone) report.finished(i, r);  // not when stopped
  }
  out.metrics = engine::EngineMetrics(group->engine(0).num_draft_tokens());
  for (int32_t r = 0; r < group->world_size(); ++r) {
    out.metrics.merge_rank(group->engine(r).metrics());
    out.timing.add(models[size_t(r)]->timing());
    const runtime::GraphStats& g = models[size_t(r)]->graph_stats();
    out.graphs.graphs += g.graphs;
    out.graphs.nodes += g.nodes;
    out.graphs.capture_s += g.capture_s;
  }
  out.dp.steps = group->steps();
  return out;
}

}  // namespace dsa::cli
