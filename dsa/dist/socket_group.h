// A process group over TCP: one process per rank (as dsa's launcher starts them), all_reduce of a
// few host int64 values through rank 0. It is the CPU counterpart of NcclGroup's all_reduce: the
// product path on GPUs is NCCL (docs/multi_gpu.md); this one lets CPU runs with several ranks as
// separate processes — and CI, which has no GPU — run the multi-process path for real. LocalGroup
// is the in-process (threads) form of the same contract.
//
// Rank 0 listens on `addr`; every other rank connects (retrying until the timeout, since rank 0
// may start later) and says hello (magic, version, rank, world size, flags hash); rank 0 refuses a
// duplicate or out-of-range rank, another world size or another flags hash, and tells the refused
// rank why. Each all_reduce is a star: every peer sends {sequence number, op, count, values},
// rank 0 checks they match its own call, reduces and sends the result back. Messages are in host
// byte order (every rank runs on one node).
//
// Like LocalGroup, and unlike NCCL, it diagnoses the caller's bugs instead of hanging: a call with
// another op or size (SPEC.md §9 bug class 10), a rank that does not call within the timeout or
// whose process went away, each break the group with an error naming the collective
// ("all_reduce #N", counted from 1) and the rank. Rank 0 sends its error to every peer and closes
// their sockets, so they fail with rank 0's reason rather than at their own timeout. A broken
// group fails every later call on that rank at once, with the first error's text.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dsa/dist/bootstrap.h"
#include "dsa/dist/collective.h"
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
class SocketGroup final : public Collective {
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

 private:
  // Rank 0: what arrived so far of one peer's message in the current call.
  struct Incoming {
    uint8_t header[24];  // the wire CallHeader (socket_group.cc)
    size_t header_got = 0;
    bool checked = false;  // the header matched rank 0's call
    std::vector<int64_t> values;
    size_t values_got = 0;  // bytes
    bool done = false;
  };
  explicit SocketGroup(const SocketGroupConfig& config);

  // create's second half: rank 0 admits every peer, a peer checks in with rank 0.
  Status serve(const SocketGroupConfig& config);
  Status join(const SocketGroupConfig& config);

  Status root_all_reduce(std::span<int64_t> values, ReduceOp op);
  Status peer_all_reduce(std::span<int64_t> values, ReduceOp op);
  // Rank 0: the next bytes of peer `r`'s message; its header is checked against this call as
  // soon as it is complete. Sets *done once the whole message is in.
  Status receive_from(int32_t r, ReduceOp op, size_t count, bool* done);
  std::string call_name(ReduceOp op, size_t count) const;
  // Records the group's first error; rank 0 also tells every peer and closes their sockets.
  Status fail(Status error);

  int32_t rank_;
  int32_t world_size_;
  std::chrono::milliseconds timeout_;
  int64_t calls_ = 0;               // all_reduce calls made on this rank, the current one included
  std::vector<tcp::Socket> peers_;  // rank 0: [world_size], peers_[r] is rank r's; [0] unused
  tcp::Socket root_;                // a peer: its connection to rank 0
  std::vector<Incoming> incoming_;  // rank 0: [world_size], each peer's message in this call
  std::vector<uint8_t> out_;        // the message being sent, header and values in one send
  Status broken_;                   // set once; every later call returns it
};

}  // namespace dsa::dist
