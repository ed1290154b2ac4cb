// The product process group on GPUs (docs/multi_gpu.md): Collective over NCCL, one process per GPU.
// Built only with CUDA (library dsa_dist_nccl, linked by what runs several GPUs; the rest of dsa
// does not need libnccl at run time). The header holds no CUDA or NCCL types.
//
// all_reduce copies the values to the device, runs ncclAllReduce on the group's own stream and
// copies them back: a host synchronisation, taken once per step by every rank at the same point,
// outside any graph. It never waits forever: past the timeout it aborts the communicator and
// returns an error, like LocalGroup's watchdog; a broken group fails every later call.
//
// It is also the DeviceCollective of the MoE's expert parallelism: all_gather and
// reduce_scatter_sum_bf16 enqueue ncclAllGather / ncclReduceScatter on cuda::current_stream()
// (the model's forward stream) and return without synchronising, so a forward body that calls
// them can be captured into a CUDA graph (NCCL >= 2.9). They share the communicator with
// all_reduce: the engine calls all_reduce only between forwards, after the previous forward's
// outputs were read, so every rank issues the communicator's calls in one order.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "dsa/dist/bootstrap.h"
#include "dsa/dist/collective.h"
#include "dsa/dist/device_collective.h"

namespace dsa::dist {

// Rank 0 creates the id (before any rank initialises); exchange_unique_id (bootstrap.h) carries
// it to the others.
StatusOr<NcclId> nccl_unique_id();

class NcclGroup final : public Collective, public DeviceCollective {
 public:
  // Most int64 values one all_reduce takes: the Collective contract's bound.
  static constexpr size_t kMaxValues = kMaxAllReduceValues;

  // Joins the group on the current CUDA device; every rank calls it with the same id and world
  // size. InvalidArgument for rank outside [0, world_size) or a timeout <= 0.
  static StatusOr<std::unique_ptr<NcclGroup>> create(int32_t rank, int32_t world_size,
                                                     const NcclId& id,
                                                     std::chrono::milliseconds timeout);
  ~NcclGroup() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  Status all_reduce(std::span<int64_t> values, ReduceOp op) override;
  // DeviceCollective, device pointers, on cuda::current_stream(); no host synchronisation (a
  // non-blocking communicator still connecting is waited for by polling its state, not a stream).
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  Status reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) override;

 private:
  struct Handles;
  NcclGroup(int32_t rank, int32_t world_size, std::chrono::milliseconds timeout);
  enum class Until { kReady, kDrained };
  Status wait(const char* what, Until until);
  // After an enqueue that returned r: waits for a non-blocking communicator's pending call, and
  // breaks the group on an error (the communicator is aborted).
  Status enqueued(int nccl_result, const char* what);  // an ncclResult_t (no NCCL types here)
  Status break_group(Status s);  // aborts the communicator, keeps s for every later call

  int32_t rank_, world_size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Handles> h_;
  int64_t calls_ = 0;
  Status broken_;
};

}  // namespace dsa::dist
