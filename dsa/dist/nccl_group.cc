#include "dsa/dist/nccl_group.h"

// cuda_bf16.h before nccl.h: NCCL releases before 2.19 declare ncclBfloat16 only where the CUDA
// bf16 type is defined.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/stream.h"

namespace dsa::dist {

namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);

Status nccl_status(ncclResult_t r, const char* call) {
  return internal_error(fmt::format("{}: {} ({})", call, ncclGetErrorString(r), int(r)));
}

#define DSA_NCCL_RETURN_IF_ERROR(call)                                      \
  do {                                                                      \
    ncclResult_t dsa_nccl_r_ = (call);                                      \
    if (dsa_nccl_r_ != ncclSuccess) return nccl_status(dsa_nccl_r_, #call); \
  } while (0)

}  // namespace

struct NcclGroup::Handles {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int64_t* device = nullptr;  // [kMaxValues]
  int64_t* pinned = nullptr;  // [kMaxValues], page-locked so the copies are asynchronous
};

StatusOr<NcclId> nccl_unique_id() {
  ncclUniqueId id;
  DSA_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  NcclId out;
  std::memcpy(out.data(), &id, kNcclIdBytes);
  return out;
}

NcclGroup::NcclGroup(int32_t rank, int32_t world_size, std::chrono::milliseconds timeout)
    : rank_(rank), world_size_(world_size), timeout_(timeout), h_(std::make_unique<Handles>()) {}

StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::create(int32_t rank, int32_t world_size,
                                                       const NcclId& id,
                                                       std::chrono::milliseconds timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return invalid_argument(fmt::format(
        "nccl group: rank = {}, world_size = {}: need 0 <= rank < world_size", rank, world_size));
  }
  if (timeout.count() <= 0) {
    return invalid_argument(
        fmt::format("nccl group: timeout = {} ms: must be > 0", timeout.count()));
  }
  std::unique_ptr<NcclGroup> g(new NcclGroup(rank, world_size, timeout));
  Handles& h = *g->h_;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&h.stream, cudaStreamNonBlocking));
  DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&h.device, kMaxValues * sizeof(int64_t)));
  DSA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h.pinned, kMaxValues * sizeof(int64_t)));
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), kNcclIdBytes);
  // Non-blocking, so a peer that dies between the bootstrap and here (or never connects) ends in
  // the watchdog's error instead of a rank blocked in ncclCommInitRank forever.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t init = ncclCommInitRankConfig(&h.comm, world_size, nid, rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    return nccl_status(init, "ncclCommInitRankConfig");
  }
  if (Status s = g->wait("ncclCommInitRankConfig", Until::kReady); !s.ok()) {
    if (h.comm != nullptr) ncclCommAbort(h.comm);
    h.comm = nullptr;
    return s;
  }
  return g;
}

NcclGroup::~NcclGroup() {
  // Teardown errors have nowhere to go. A broken group's communicator was aborted already
  // (ncclCommDestroy would wait for peers that may be gone).
  if (h_->comm != nullptr) ncclCommDestroy(h_->comm);
  if (h_->pinned != nullptr) cudaFreeHost(h_->pinned);
  if (h_->device != nullptr) cudaFree(h_->device);
  if (h_->stream != nullptr) cudaStreamDestroy(h_->stream);
}

// Polls instead of blocking (cudaStreamSynchronize, a blocking communicator): a peer that never
// arrives must end in an error after the timeout, not a hang. kReady: the communicator's pending
// call (init, or a collective's enqueue while it connects) is done; kDrained: the group's stream
// has run everything enqueued on it.
Status NcclGroup::wait(const char* what, Until until) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    if (until == Until::kDrained) {
      const cudaError_t q = cudaStreamQuery(h_->stream);
      if (q == cudaSuccess) return ok_status();
      if (q != cudaErrorNotReady) return cuda::cuda_status(q, what, __FILE__, __LINE__);
    }
    ncclResult_t state = ncclSuccess;
    DSA_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(h_->comm, &state));
    if (state == ncclSuccess && until == Until::kReady) return ok_status();
    if (state != ncclSuccess && state != ncclInProgress) return nccl_status(state, what);
    if (std::chrono::steady_clock::now() > deadline) {
      return internal_error(fmt::format(
          "nccl group: watchdog: rank {} waited {} ms in {} (collective #{}): a rank is missing, "
          "skipped a collective or took a branch the others did not (SPEC.md §7)",
          rank_, timeout_.count(), what, calls_));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status NcclGroup::all_reduce(std::span<int64_t> values, ReduceOp op) {
  if (!broken_.ok()) return broken_;
  if (values.size() > kMaxValues) {
    return invalid_argument(
        fmt::format("nccl all_reduce: {} values: at most {}", values.size(), kMaxValues));
  }
  const size_t bytes = values.size() * sizeof(int64_t);
  std::memcpy(h_->pinned, values.data(), bytes);
  ncclRedOp_t nop = ncclSum;
  switch (op) {
    case ReduceOp::kSum:
      nop = ncclSum;
      break;
    case ReduceOp::kMax:
      nop = ncclMax;
      break;
  }
  Status s = [&]() -> Status {
    DSA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_->device, h_->pinned, bytes, cudaMemcpyHostToDevice, h_->stream));
    const ncclResult_t r =
        ncclAllReduce(h_->device, h_->device, values.size(), ncclInt64, nop, h_->comm, h_->stream);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_status(r, "ncclAllReduce");
    // A non-blocking communicator may still be connecting to its peers: the collective is on the
    // stream only once that is done, so nothing else is enqueued before.
    DSA_RETURN_IF_ERROR(wait("ncclAllReduce", Until::kReady));
    DSA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_->pinned, h_->device, bytes, cudaMemcpyDeviceToHost, h_->stream));
    return wait("all_reduce", Until::kDrained);
  }();
  ++calls_;
  if (!s.ok()) return break_group(s);
  std::memcpy(values.data(), h_->pinned, bytes);
  return ok_status();
}

Status NcclGroup::break_group(Status s) {
  // The collective may still be spinning on the device waiting for a peer: abort it now, so this
  // rank's stream drains and the error reaches the caller in a usable process. Every later call
  // returns the same error: the ranks are no longer in step.
  ncclCommAbort(h_->comm);
  h_->comm = nullptr;
  broken_ = s;
  return s;
}

Status NcclGroup::enqueued(int nccl_result, const char* what) {
  const auto r = static_cast<ncclResult_t>(nccl_result);
  Status s = ok_status();
  if (r != ncclSuccess && r != ncclInProgress) {
    s = nccl_status(r, what);
  } else {
    // Polls the communicator's state only (ncclCommGetAsyncError): legal while the stream
    // captures, and no stream is waited for.
    s = wait(what, Until::kReady);
  }
  ++calls_;
  if (!s.ok()) return break_group(s);
  return s;
}

Status NcclGroup::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  if (!broken_.ok()) return broken_;
  if (bytes_per_rank == 0) return ok_status();
  return enqueued(
      ncclAllGather(send, recv, bytes_per_rank, ncclUint8, h_->comm, cuda::current_stream()),
      "ncclAllGather");
}

Status NcclGroup::reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) {
  if (!broken_.ok()) return broken_;
  if (count == 0) return ok_status();
  return enqueued(
      ncclReduceScatter(send, recv, count, ncclBfloat16, ncclSum, h_->comm, cuda::current_stream()),
      "ncclReduceScatter");
}

}  // namespace dsa::dist
