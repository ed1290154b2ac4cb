// A process group over TCP: one process per rank (as dsa's launcher starts them), with the host
// all_reduce of a few int64 values (Collective) and, for the CPU backend only, the MoE's
// expert-parallel collectives over host memory (DeviceCollective: all_gather and
// reduce_scatter_sum_bf16; on the CPU backend a "device" buffer is a host pointer). It is the CPU
// counterpart of NcclGroup: the product path on GPUs is NCCL (docs/multi_gpu.md), whose
// DeviceCollective takes device memory; this one lets CPU runs with several ranks as separate
// processes — and CI, which has no GPU — run the multi-process path for real. LocalGroup and
// LocalDeviceGroup are the in-process (threads) forms of the same contracts, and this group gives
// the same bits as LocalDeviceGroup (the same rank-order sum, sum_bf16_blocks).
//
// Rank 0 listens on `addr`; every other rank connects (retrying until the timeout, since rank 0
// may start later) and says hello (magic, version, rank, world size, flags hash); rank 0 refuses a
// duplicate or out-of-range rank, another world size or another flags hash, and tells the refused
// rank why. Each collective is a star: every peer sends {sequence number, kind, op, size, its
// data}; rank 0 reads every peer's whole message before it sends anything (so a peer blocked on a
// large send never waits on rank 0 blocked on one), checks each header against its own call,
// then computes and sends every peer its result: the reduced values (all_reduce), every rank's
// bytes in rank order (all_gather), or the peer's block of the sum (reduce_scatter, rank 0 sums
// every block). Messages are in host byte order (every rank runs on one node).
//
// Like LocalGroup, and unlike NCCL, it diagnoses the caller's bugs instead of hanging: a call of
// another kind, op or size (SPEC.md §9 bug class 10), a rank that does not call within the
// timeout or whose process went away, each break the group with an error naming the collective
// ("all_gather #N": the three kinds share one count, from 1), the rank, the field that differs
// and both values. Rank 0 sends its error to every peer and closes their sockets, so they fail
// with rank 0's reason rather than at their own timeout. A broken group fails every later call of
// any kind on that rank at once, with the first error's text. On an error the output buffer
// (values, recv) is unspecified.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/dist/bootstrap.h"
#include "dsa/dist/collective.h"
#include "dsa/dist/device_collective.h"
#include "dsa/dist/tcp.h"

namespace dsa::dist {

struct SocketGroupConfig {
  InitAddr addr;  // rank 0 listens here (parse_init_addr); unused for world size 1
  int32_t rank = 0;
  int32_t world_size = 1;
  uint64_t flags_hash = 0;  // every rank must pass the same; rank 0 refuses another
  // The connect phase, and each all_reduce's watchdog: rank 0 gives up on a peer after this long.
  // A peer waits this long plus min(timeout, 5 s) for rank 0's result, so that rank 0's verdict
  // (which names the missing rank) normally reaches it before its own deadline does.
  std::chrono::milliseconds timeout{60000};
};

inline constexpr int32_t kMaxSocketGroupWorldSize = 1024;

// One rank's handle; used by one thread at a time.
class SocketGroup final : public Collective, public DeviceCollective {
 public:
  // InvalidArgument naming the field and its value for a rank outside [0, world_size), a world
  // size outside [1, kMaxSocketGroupWorldSize], a timeout <= 0, or (world size > 1) an empty host
  // or a port outside [1, 65535]. World size 1 opens no socket. Otherwise returns on rank 0 once
  // every peer checked in (Internal naming the ranks that never did, InvalidArgument naming the
  // refused rank and both values), on a peer once rank 0 accepted it (FailedPrecondition with
  // rank 0's reason when refused, Internal when rank 0 could not be reached in time).
  static StatusOr<std::unique_ptr<SocketGroup>> create(const SocketGroupConfig& config);
  ~SocketGroup() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  // On error `values` is unspecified and the group is broken.
  Status all_reduce(std::span<int64_t> values, ReduceOp op) override;
  // Host memory only (the CPU backend). World size 1: a copy of send to recv. send and recv must
  // not overlap (unchecked, as in LocalDeviceGroup).
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  // Host memory only. Bit for bit LocalDeviceGroup's result (sum_bf16_blocks), world size 1
  // included (the round trip through fp32: a copy, except that a NaN comes back quiet).
  Status reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) override;

 private:
  enum class Kind : uint32_t { kAllReduce = 1, kAllGather = 2, kReduceScatter = 3 };
  // One collective as this rank makes it: what rank 0 checks every peer's header against.
  struct Call {
    Kind kind;
    ReduceOp op;    // all_reduce only (kSum for the others)
    uint64_t size;  // all_reduce: values; all_gather: bytes per rank; reduce_scatter: values per
                    // rank (each rank sends world_size times as many)
    size_t send_bytes;    // each rank's message after the header
    size_t result_bytes;  // each peer's answer after the verdict
  };
  // Rank 0: what arrived so far of one peer's message in the current call.
  struct Incoming {
    uint8_t header[24];  // the wire CallHeader (socket_group.cc)
    size_t header_got = 0;
    bool checked = false;     // the header matched rank 0's call
    uint8_t* data = nullptr;  // where the message's data goes (set for each call)
    size_t data_got = 0;      // bytes
    bool done = false;
    // The data's home unless it goes straight to the caller's recv (all_gather); each keeps its
    // capacity from call to call.
    std::vector<int64_t> values;  // all_reduce
    std::vector<bf16> blocks;     // reduce_scatter: the peer's whole send [world_size * count]
  };
  explicit SocketGroup(const SocketGroupConfig& config);

  // create's second half: rank 0 admits every peer, a peer checks in with rank 0.
  Status serve(const SocketGroupConfig& config);
  Status join(const SocketGroupConfig& config);

  // What every kind starts with: the broken state, the call's number, its byte counts. Returns the
  // call, or the error (the group is broken by then).
  StatusOr<Call> begin(Kind kind, ReduceOp op, uint64_t size);
  // Rank 0: every peer's whole message, each to its incoming_[r].data (set by the caller).
  Status root_collect(const Call& call);
  // Rank 0: sends peer r the verdict and `result_bytes` of `result`.
  Status root_answer(const Call& call, int32_t r, const void* result,
                     tcp::Clock::time_point deadline);
  // A peer: sends its header and `send`, then reads rank 0's answer into `result`.
  Status peer_call(const Call& call, const void* send, void* result);
  // Rank 0: the next bytes of peer `r`'s message; its header is checked against this call as
  // soon as it is complete. Sets *done once the whole message is in.
  Status receive_from(int32_t r, const Call& call, bool* done);
  // "all_reduce #3 (sum, 2 values)", "all_gather #4 (16 bytes per rank)".
  std::string call_name(const Call& call) const;
  static std::string kind_text(uint32_t kind);  // a wire kind, "<unknown kind 7>" if none
  static std::string_view size_unit(Kind kind);
  // Records the group's first error; rank 0 also tells every peer and closes their sockets.
  Status fail(Status error);

  int32_t rank_;
  int32_t world_size_;
  std::chrono::milliseconds timeout_;
  int64_t calls_ = 0;               // collectives (every kind) made on this rank, this one included
  std::vector<tcp::Socket> peers_;  // rank 0: [world_size], peers_[r] is rank r's; [0] unused
  tcp::Socket root_;                // a peer: its connection to rank 0
  std::vector<Incoming> incoming_;  // rank 0: [world_size], each peer's message in this call
  std::vector<uint8_t> out_;        // a small message being sent, header and data in one send
  std::vector<bf16> sum_;           // rank 0, reduce_scatter: one peer's block of the sum
  std::vector<const bf16*> parts_;  // rank 0, reduce_scatter: every rank's block for one rank
  Status broken_;                   // set once; every later call returns it
};

}  // namespace dsa::dist
