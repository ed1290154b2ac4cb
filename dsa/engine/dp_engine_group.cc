#include "dsa/engine/dp_engine_group.h"

#include <fmt/format.h>

#include <exception>
#include <thread>

#include "dsa/engine/dp_placement.h"
#include "dsa/engine/dp_rank_loop.h"

namespace dsa::engine {

namespace {

// What every rank must share: the step plan is computed from these on each rank.
Status check_same_options(const model::DsaModel& a, const model::DsaModel& b, size_t rank) {
  const model::ModelOptions &x = a.options(), &y = b.options();
  if (x.num_draft_tokens != y.num_draft_tokens || x.buckets != y.buckets ||
      a.metadata_config().max_requests != b.metadata_config().max_requests ||
      a.metadata_config().max_extend_rows != b.metadata_config().max_extend_rows) {
    return invalid_argument(
        fmt::format("dp group: models[{}] differs from models[0] in d, buckets, max_requests or "
                    "max_extend_rows (every rank must run the same step plans)",
                    rank));
  }
  return ok_status();
}

// Expert parallelism splits the experts over exactly the DP ranks (docs/multi_gpu.md): rank r's
// model must be EP rank r of the world, or every model must be ep_size 1.
Status check_expert_parallel(const model::DsaModel& m, size_t rank, size_t world) {
  const model::ModelOptions& o = m.options();
  if (o.ep_size == 1) return ok_status();
  if (size_t(o.ep_size) != world) {
    return invalid_argument(fmt::format(
        "dp group: models[{}] has ep_size = {}: expert parallelism needs ep_size == the dp size "
        "{} (every DP rank owns a share of the experts)",
        rank, o.ep_size, world));
  }
  if (size_t(o.ep_rank) != rank) {
    return invalid_argument(fmt::format(
        "dp group: models[{}] has ep_rank = {}: must be its dp rank {}", rank, o.ep_rank, rank));
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<DpEngineGroup>> DpEngineGroup::create(
    std::vector<model::DsaModel*> models, const EngineOptions& options,
    std::chrono::milliseconds timeout,
    const std::function<void(int32_t rank, EngineOptions&)>& per_rank) {
  if (models.empty()) return invalid_argument("dp group: models is empty (no ranks)");
  for (size_t r = 0; r < models.size(); ++r) {
    if (models[r] == nullptr)
      return invalid_argument(fmt::format("dp group: models[{}] is null", r));
    DSA_RETURN_IF_ERROR(check_same_options(*models[0], *models[r], r));
    if (models[r]->options().ep_size != models[0]->options().ep_size) {
      return invalid_argument(fmt::format("dp group: models[{}] has ep_size = {}, models[0] {}", r,
                                          models[r]->options().ep_size,
                                          models[0]->options().ep_size));
    }
    DSA_RETURN_IF_ERROR(check_expert_parallel(*models[r], r, models.size()));
  }
  DSA_ASSIGN_OR_RETURN(std::unique_ptr<dist::LocalGroup> group,
                       dist::LocalGroup::create(int32_t(models.size()), timeout));
  return std::unique_ptr<DpEngineGroup>(
      new DpEngineGroup(std::move(group), std::move(models), options, per_rank));
}

DpEngineGroup::DpEngineGroup(std::unique_ptr<dist::LocalGroup> group,
                             std::vector<model::DsaModel*> models, const EngineOptions& options,
                             const std::function<void(int32_t, EngineOptions&)>& per_rank)
    : group_(std::move(group)), steps_(models.size(), 0) {
  for (size_t r = 0; r < models.size(); ++r) {
    EngineOptions o = options;
    if (per_rank) per_rank(int32_t(r), o);
    engines_.push_back(std::make_unique<Engine>(*models[r], o, &group_->rank(int32_t(r))));
  }
}

bool DpEngineGroup::has_work() const {
  for (const auto& e : engines_) {
    if (e->has_work()) return true;
  }
  return false;
}

StatusOr<DpRequestId> DpEngineGroup::add_request(GenerationRequest req) {
  std::vector<int64_t> loads;
  for (const auto& e : engines_) loads.push_back(e->load());
  const int64_t cost[] = {placement_cost(int64_t(req.prompt.size()), req.max_new_tokens)};
  DSA_ASSIGN_OR_RETURN(const std::vector<int32_t> owner, place_requests(loads, cost));
  return add_request_on(owner[0], std::move(req));
}

StatusOr<DpRequestId> DpEngineGroup::add_request_on(int32_t rank, GenerationRequest req) {
  if (rank < 0 || rank >= world_size()) {
    return invalid_argument(
        fmt::format("dp group: rank = {}: must be in [0, {})", rank, world_size()));
  }
  DSA_ASSIGN_OR_RETURN(const int64_t id, engine(rank).add_request(std::move(req)));
  return DpRequestId{rank, id};
}

// One rank's loop (dp_rank_loop.h): the same loop a rank of its own process takes.
Status DpEngineGroup::run_rank(int32_t rank, const std::function<bool()>& stop) {
  DSA_ASSIGN_OR_RETURN(steps_[size_t(rank)], run_rank_to_completion(engine(rank), stop));
  return ok_status();
}

Status DpEngineGroup::run_to_completion(const std::function<bool()>& stop) {
  for (int64_t& n : steps_) n = 0;
  return on_every_rank([this, &stop](int32_t r) { return run_rank(r, stop); });
}

Status DpEngineGroup::step_all() {
  for (int64_t& n : steps_) n = 0;
  return on_every_rank([this](int32_t r) {
    DSA_RETURN_IF_ERROR(engine(r).step());
    ++steps_[size_t(r)];
    return ok_status();
  });
}

Status DpEngineGroup::on_every_rank(const std::function<Status(int32_t)>& body) {
  std::vector<Status> status(engines_.size());
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world_size(); ++r) {
    // An exception must not escape a rank's thread (std::terminate would take the server down):
    // it becomes that rank's Status, as a throwing step is on the engine loop's own thread.
    threads.emplace_back([r, &status, &body] {
      try {
        status[size_t(r)] = body(r);
      } catch (const std::exception& e) {
        status[size_t(r)] = internal_error(fmt::format("step threw: {}", e.what()));
      } catch (...) {
        status[size_t(r)] = internal_error("step threw a non-standard exception");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // The rank that failed first explains it; the others then time out in a collective.
  for (size_t r = 0; r < status.size(); ++r) {
    if (!status[r].ok() && status[r].message().find("local group:") == std::string::npos) {
      return status[r].with_context(fmt::format("dp rank {}", r));
    }
  }
  for (size_t r = 0; r < status.size(); ++r) {
    if (!status[r].ok()) return status[r].with_context(fmt::format("dp rank {}", r));
  }
  return ok_status();
}

}  // namespace dsa::engine
