// Stream-ordered collectives over backend buffers (docs/multi_gpu.md): what the MoE's expert
// parallelism moves between ranks inside a forward (model/expert_parallel.h). A second interface
// beside the host int64 `Collective`: those values steer the host (the step agreement), these
// bytes never leave the backend, so on CUDA a call only enqueues work on cuda::current_stream()
// (the stream the model's ops run on) and never synchronises the host: the calls of a forward
// body are captured into its CUDA graph like its kernels. On the CPU backend they are host
// memory and complete before returning.
//
// Contract, as for Collective: every rank makes the same sequence of calls, each with the same
// kind and size (bug class 10: an idle rank's all-padding forward still makes every call). The
// in-process group reports a mismatch; NCCL would hang or corrupt, which is why the engine's
// checked mode cross-checks each forward's shape before it runs (engine/dp_step.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::dist {

class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // recv [world_size * bytes_per_rank] bytes: rank q's `send` [bytes_per_rank] lands at offset
  // q * bytes_per_rank (rank order). send and recv must not overlap.
  virtual Status all_gather(const void* send, void* recv, size_t bytes_per_rank) = 0;
  // send [world_size * count] bf16 on every rank; recv [count] on rank r: element i is the sum over
  // ranks q of send_q[r * count + i]. The in-process group adds in rank order in fp32 from rank
  // 0's value and rounds once; NCCL's order is its own. Where every rank but one holds -0.0 (the
  // MoE's slot outputs, each computed by one rank) every order gives the one value bit for bit:
  // -0 is the additive identity (+0 is not: +0 + -0 = +0).
  virtual Status reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) = 0;
};

// World size 1: both collectives are a copy of send to recv, by the backend's copy (host memcpy;
// cudaMemcpyAsync on the current stream). `copy` is runtime::MemoryOps::copy of the backend the
// buffers live in (passed in so dist does not depend on the runtime).
class SoloDeviceCollective final : public DeviceCollective {
 public:
  using CopyFn = Status (*)(void* dst, const void* src, size_t bytes);
  explicit SoloDeviceCollective(CopyFn copy) : copy_(copy) {}
  int32_t rank() const override { return 0; }
  int32_t world_size() const override { return 1; }
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  Status reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) override;

 private:
  CopyFn copy_;
};

}  // namespace dsa::dist
