#include "dsa/dist/local_device_group.h"

#include <fmt/format.h>

#include <cstring>

#include "dsa/core/check.h"

namespace dsa::dist {

namespace {

enum class Kind : int64_t { kAllGather = 1, kReduceScatter = 2 };

const char* kind_name(int64_t k) {
  switch (Kind(k)) {
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter_sum_bf16";
  }
  return "?";
}

}  // namespace

class LocalDeviceGroup::Rank final : public DeviceCollective {
 public:
  Rank(LocalDeviceGroup& g, int32_t rank) : g_(g), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return g_.world_size(); }

  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override {
    DSA_RETURN_IF_ERROR(publish(Kind::kAllGather, send, bytes_per_rank));
    auto* out = static_cast<uint8_t*>(recv);
    for (int32_t q = 0; q < world_size(); ++q) {
      if (bytes_per_rank > 0) {
        std::memcpy(out + size_t(q) * bytes_per_rank, g_.posted_[size_t(q)], bytes_per_rank);
      }
    }
    return release(Kind::kAllGather);
  }

  Status reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) override {
    DSA_RETURN_IF_ERROR(publish(Kind::kReduceScatter, send, count));
    const size_t base = size_t(rank_) * count;
    blocks_.resize(size_t(world_size()));
    for (int32_t q = 0; q < world_size(); ++q) {
      blocks_[size_t(q)] = static_cast<const bf16*>(g_.posted_[size_t(q)]) + base;
    }
    sum_bf16_blocks(blocks_, count, recv);  // rank order, from rank 0's value, rounded once
    return release(Kind::kReduceScatter);
  }

 private:
  // First meeting: publish the send buffer; every rank learns whether all made the same call
  // (max of (kind, -kind, size, -size) gives the largest and the smallest of each).
  Status publish(Kind kind, const void* send, size_t size) {
    if (!broken_.ok()) return broken_;
    g_.posted_[size_t(rank_)] = send;
    int64_t v[] = {int64_t(kind), -int64_t(kind), int64_t(size), -int64_t(size)};
    if (Status s = g_.meet_->rank(rank_).all_reduce(v, ReduceOp::kMax); !s.ok()) {
      broken_ = s.with_context(fmt::format("local device group: {}", kind_name(int64_t(kind))));
      return broken_;
    }
    if (v[0] != -v[1] || v[2] != -v[3]) {
      broken_ = failed_precondition(fmt::format(
          "local device group: rank {} called {}({} per rank); the ranks' calls range over "
          "kinds [{}, {}] and sizes [{}, {}]: the ranks are not making the same call (SPEC.md "
          "§9 bug class 10)",
          rank_, kind_name(int64_t(kind)), size, kind_name(-v[1]), kind_name(v[0]), -v[3], v[2]));
      return broken_;
    }
    return ok_status();
  }
  // Second meeting: no rank reuses its send buffer before every rank has read it.
  Status release(Kind kind) {
    int64_t v[] = {int64_t(kind)};
    if (Status s = g_.meet_->rank(rank_).all_reduce(v, ReduceOp::kMax); !s.ok()) {
      broken_ = s.with_context(fmt::format("local device group: {}", kind_name(int64_t(kind))));
      return broken_;
    }
    return ok_status();
  }

  LocalDeviceGroup& g_;
  int32_t rank_;
  Status broken_;
  std::vector<const bf16*> blocks_;  // reduce_scatter: each rank's block for this rank
};

StatusOr<std::unique_ptr<LocalDeviceGroup>> LocalDeviceGroup::create(
    int32_t world_size, std::chrono::milliseconds timeout) {
  DSA_ASSIGN_OR_RETURN(std::unique_ptr<LocalGroup> meet, LocalGroup::create(world_size, timeout));
  return std::unique_ptr<LocalDeviceGroup>(new LocalDeviceGroup(std::move(meet)));
}

LocalDeviceGroup::LocalDeviceGroup(std::unique_ptr<LocalGroup> meet)
    : meet_(std::move(meet)), posted_(size_t(meet_->world_size()), nullptr) {
  for (int32_t r = 0; r < world_size(); ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

LocalDeviceGroup::~LocalDeviceGroup() = default;

DeviceCollective& LocalDeviceGroup::rank(int32_t r) {
  DSA_CHECK(r >= 0 && r < world_size());
  return *ranks_[size_t(r)];
}

}  // namespace dsa::dist
