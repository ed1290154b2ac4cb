#include "dsa/dist/local_group.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsa::dist {

class LocalGroup::Rank final : public Collective {
 public:
  Rank(LocalGroup& group, int32_t rank) : group_(group), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return group_.world_size(); }
  Status all_reduce(std::span<int64_t> values, ReduceOp op) override {
    return group_.all_reduce(rank_, values, op);
  }

 private:
  LocalGroup& group_;
  int32_t rank_;
};

StatusOr<std::unique_ptr<LocalGroup>> LocalGroup::create(int32_t world_size,
                                                         std::chrono::milliseconds timeout) {
  if (world_size < 1 || world_size > 1024) {
    return invalid_argument(
        fmt::format("local group: world_size = {}: must be in [1, 1024]", world_size));
  }
  if (timeout.count() <= 0) {
    return invalid_argument(
        fmt::format("local group: timeout = {} ms: must be > 0", timeout.count()));
  }
  return std::unique_ptr<LocalGroup>(new LocalGroup(world_size, timeout));
}

LocalGroup::LocalGroup(int32_t world_size, std::chrono::milliseconds timeout)
    : timeout_(timeout), arrived_(static_cast<size_t>(world_size), 0) {
  for (int32_t r = 0; r < world_size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

LocalGroup::~LocalGroup() = default;

Collective& LocalGroup::rank(int32_t r) {
  DSA_CHECK(r >= 0 && r < world_size());
  return *ranks_[static_cast<size_t>(r)];
}

int64_t LocalGroup::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

std::string LocalGroup::missing_report(int64_t call) const {
  std::vector<int32_t> here, missing;
  for (int32_t r = 0; r < world_size(); ++r) {
    (arrived_[static_cast<size_t>(r)] ? here : missing).push_back(r);
  }
  return fmt::format("collective #{}: ranks [{}] arrived, ranks [{}] missing", call,
                     fmt::join(here, ", "), fmt::join(missing, ", "));
}

// Adds this rank's values to the current collective (under mu_); completes it when last.
Status LocalGroup::arrive(int32_t rank, std::span<const int64_t> values, ReduceOp op) {
  if (num_arrived_ == 0) {
    op_ = op;
    acc_.assign(values.begin(), values.end());
  } else if (op != op_ || values.size() != acc_.size()) {
    broken_ = failed_precondition(
        fmt::format("local group: {}: rank {} called all_reduce({}, {} values), an earlier rank "
                    "all_reduce({}, {} values): the ranks are not making the same call",
                    missing_report(generation_), rank, reduce_op_name(op), values.size(),
                    reduce_op_name(op_), acc_.size()));
    return broken_;
  } else {
    reduce_into(acc_, values, op);
  }
  arrived_[static_cast<size_t>(rank)] = 1;
  if (++num_arrived_ == world_size()) {
    result_ = acc_;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    num_arrived_ = 0;
    ++generation_;
  }
  return ok_status();
}

Status LocalGroup::all_reduce(int32_t rank, std::span<int64_t> values, ReduceOp op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  const int64_t call = generation_;
  if (Status s = arrive(rank, values, op); !s.ok()) {
    cv_.notify_all();
    return s;
  }
  if (generation_ == call) {
    const bool done =
        cv_.wait_for(lock, timeout_, [&] { return generation_ != call || !broken_.ok(); });
    // A collective that completed wins over a later break: its result is valid for every rank.
    if (generation_ == call) {
      if (broken_.ok()) {
        DSA_CHECK(!done);
        broken_ = internal_error(fmt::format(
            "local group: watchdog: rank {} waited {} ms in all_reduce({}, {} values); {} (a rank "
            "skipped a collective or took a branch the others did not, SPEC.md §7)",
            rank, timeout_.count(), reduce_op_name(op), values.size(), missing_report(call)));
        cv_.notify_all();
      }
      return broken_;
    }
  } else {
    cv_.notify_all();
  }
  // result_ stays valid until the next collective completes, which needs this rank again.
  std::copy(result_.begin(), result_.end(), values.begin());
  return ok_status();
}

}  // namespace dsa::dist
