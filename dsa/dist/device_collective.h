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
#include <span>

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
  // ranks q of send_q[r * count + i]. The host groups (in-process, TCP) add in rank order in fp32
  // from rank 0's value and round once (sum_bf16_blocks); NCCL's order is its own. Where every
  // rank but one holds -0.0 (the MoE's slot outputs, each computed by one rank) every order gives
  // the one value bit for bit: -0 is the additive identity (+0 is not: +0 + -0 = +0).
  virtual Status reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) = 0;
};

// The host form of reduce_scatter_sum_bf16's sum, shared by every group that reduces on the host
// (LocalDeviceGroup, SocketGroup) so that they give the same bits: out[i] is the sum over q of
// blocks[q][i], added in rank order in fp32 from blocks[0][i] (not from +0, which would turn a
// lone -0 into +0) and rounded to bf16 once. blocks[q] is rank q's block [count] for the receiving
// rank (send_q + r * count); blocks is not empty. With one block it is the round trip through
// fp32: every value comes back bit for bit, except that a NaN comes back quiet.
void sum_bf16_blocks(std::span<const bf16* const> blocks, size_t count, bf16* out);

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
