#include "dsa/dist/socket_group.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

namespace dsa::dist {

namespace {

using tcp::Clock;

constexpr std::string_view kWho = "socket group";
constexpr uint32_t kMagic = 0x44534147;  // "DSAG": not the bootstrap's "DSAB"
// 2: the call header names the collective's kind (all_reduce, all_gather, reduce_scatter).
constexpr uint32_t kVersion = 2;
// Rank 0's error text as sent to the peers; longer is cut (it only has to name what went wrong).
constexpr size_t kMaxMessageBytes = 4096;
// A message with at most this many bytes of data goes out as one send, header and data copied
// into one buffer; a larger one as the header, then the data from where it is (no copy).
constexpr size_t kCopyAtMostBytes = size_t(64) << 10;

// A peer's first message.
struct Hello {
  uint32_t magic, version;
  int32_t rank, world_size;
  uint64_t flags_hash;
};
// A peer's part of one collective; its data follows: all_reduce `size` int64 values, all_gather
// `size` bytes, reduce_scatter world_size * `size` bf16 values.
struct CallHeader {
  int64_t seq;    // 1 for the group's first collective, of any kind
  uint64_t size;  // values, bytes per rank, values per rank (SocketGroup::Call::size)
  uint32_t kind;  // SocketGroup::Kind
  uint32_t op;    // ReduceOp (all_reduce; 0 for the others)
};
// Rank 0's answer to a hello (seq 0, kind 0) or to a collective: code 0, the call's size and kind,
// and its result (none for a hello): all_reduce `count` int64 values, all_gather world_size *
// `count` bytes, reduce_scatter `count` bf16 values; or a StatusCode and `count` bytes of rank
// 0's error message (kind 0).
struct Verdict {
  int64_t seq;
  uint64_t count;
  uint32_t code;
  uint32_t kind;
};
static_assert(sizeof(Hello) == 24 && sizeof(CallHeader) == 24 && sizeof(Verdict) == 24);

// Request and answer are small and alternate: without this, Nagle's algorithm meets the peer's
// delayed ACK and a call can stall for tens of milliseconds.
void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A message: the header, then its payload, in one buffer (one send).
template <class Header, class T>
void build(std::vector<uint8_t>& out, const Header& h, const T* payload, size_t n) {
  out.resize(sizeof(Header) + n * sizeof(T));
  std::memcpy(out.data(), &h, sizeof(Header));
  if (n > 0) std::memcpy(out.data() + sizeof(Header), payload, n * sizeof(T));
}

// Sends the header and then `n` bytes of `data` (see kCopyAtMostBytes).
template <class Header>
Status send_message(int fd, const Header& h, const void* data, size_t n, std::vector<uint8_t>& out,
                    Clock::time_point deadline, std::string_view who, std::string_view what) {
  if (n <= kCopyAtMostBytes) {
    build(out, h, static_cast<const uint8_t*>(data), n);
    return tcp::transfer(fd, out.data(), out.size(), true, deadline, who, what);
  }
  Header copy = h;
  DSA_RETURN_IF_ERROR(tcp::transfer(fd, &copy, sizeof(copy), true, deadline, who, what));
  return tcp::transfer(fd, const_cast<void*>(data), n, true, deadline, who, what);
}

std::string op_text(uint32_t op) {
  if (op == uint32_t(ReduceOp::kSum) || op == uint32_t(ReduceOp::kMax)) {
    return std::string(reduce_op_name(ReduceOp(op)));
  }
  return fmt::format("<unknown op {}>", op);
}

// Rank 0's reason for refusing a hello, or "" when it is welcome.
std::string hello_problem(const Hello& h, const SocketGroupConfig& c,
                          const std::vector<tcp::Socket>& peers) {
  if (h.magic != kMagic || h.version != kVersion) {
    return fmt::format("a peer that is not a dsa socket group of version {} connected", kVersion);
  }
  if (h.world_size != c.world_size) {
    return fmt::format("rank {} was started with world size {}, rank 0 with {}", h.rank,
                       h.world_size, c.world_size);
  }
  if (h.rank < 1 || h.rank >= c.world_size) {
    return fmt::format("rank {} is outside [1, {})", h.rank, c.world_size);
  }
  if (peers[size_t(h.rank)].valid()) return fmt::format("rank {} checked in twice", h.rank);
  if (h.flags_hash != c.flags_hash) {
    return fmt::format(
        "rank {} runs with other flags (hash {:#x}, rank 0 has {:#x}): every rank must be started "
        "with the same flags",
        h.rank, h.flags_hash, c.flags_hash);
  }
  return "";
}

// Best effort (the peer may be gone already): rank 0's error, for a peer to fail with.
void send_error(int fd, int64_t seq, const Status& error, std::vector<uint8_t>& out,
                Clock::time_point deadline) {
  const std::string& text = error.message();
  const size_t n = std::min(text.size(), kMaxMessageBytes);
  build(out, Verdict{seq, n, uint32_t(error.code()), 0}, text.data(), n);
  (void)tcp::transfer(fd, out.data(), out.size(), true, deadline, kWho, "error");
}

// The message of an error verdict whose header was read already.
std::string read_error_text(int fd, const Verdict& v, Clock::time_point deadline) {
  std::string text(std::min<uint64_t>(v.count, kMaxMessageBytes), '\0');
  if (!tcp::transfer(fd, text.data(), text.size(), false, deadline, kWho, "error").ok()) {
    return "(rank 0's message did not arrive)";
  }
  return text;
}

Status status_from_verdict(uint32_t code, std::string message) {
  const bool known =
      code > uint32_t(StatusCode::kOk) && code <= uint32_t(StatusCode::kUnimplemented);
  return Status(known ? StatusCode(code) : StatusCode::kInternal, std::move(message));
}

enum class Io { kComplete, kWouldBlock, kClosed, kFailed };

// Reads what is there of bytes [*got, n) of `buf` without waiting; advances *got.
Io read_available(int fd, void* buf, size_t n, size_t* got) {
  auto* p = static_cast<uint8_t*>(buf);
  while (*got < n) {
    const ssize_t r = ::recv(fd, p + *got, n - *got, 0);
    if (r > 0) {
      *got += size_t(r);
    } else if (r == 0) {
      return Io::kClosed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return Io::kWouldBlock;
    } else if (errno != EINTR) {
      return Io::kFailed;
    }
  }
  return Io::kComplete;
}

}  // namespace

StatusOr<std::unique_ptr<SocketGroup>> SocketGroup::create(const SocketGroupConfig& c) {
  if (c.world_size < 1 || c.world_size > kMaxSocketGroupWorldSize) {
    return invalid_argument(fmt::format("socket group: world_size = {}: must be in [1, {}]",
                                        c.world_size, kMaxSocketGroupWorldSize));
  }
  if (c.rank < 0 || c.rank >= c.world_size) {
    return invalid_argument(fmt::format("socket group: rank = {}: must be in [0, world_size = {})",
                                        c.rank, c.world_size));
  }
  if (c.timeout.count() <= 0) {
    return invalid_argument(
        fmt::format("socket group: timeout = {} ms: must be > 0", c.timeout.count()));
  }
  if (c.world_size > 1 && c.addr.host.empty()) {
    return invalid_argument("socket group: addr.host is empty: rank 0 needs a host to listen on");
  }
  if (c.world_size > 1 && (c.addr.port < 1 || c.addr.port > 65535)) {
    return invalid_argument(
        fmt::format("socket group: addr.port = {}: must be in [1, 65535]", c.addr.port));
  }
  std::unique_ptr<SocketGroup> group(new SocketGroup(c));
  if (c.world_size > 1) DSA_RETURN_IF_ERROR(c.rank == 0 ? group->serve(c) : group->join(c));
  return group;
}

SocketGroup::SocketGroup(const SocketGroupConfig& c)
    : rank_(c.rank), world_size_(c.world_size), timeout_(c.timeout) {
  if (rank_ == 0) {
    peers_.resize(size_t(world_size_));
    incoming_.resize(size_t(world_size_));
  }
}

SocketGroup::~SocketGroup() = default;

Status SocketGroup::serve(const SocketGroupConfig& c) {
  const Clock::time_point deadline = Clock::now() + c.timeout;
  DSA_ASSIGN_OR_RETURN(tcp::Socket listener, tcp::listen_on(c.addr, c.world_size, kWho));
  for (int32_t joined = 0; joined < world_size_ - 1;) {
    tcp::Socket peer = tcp::accept_until(listener, deadline);
    if (!peer.valid()) {
      std::vector<int32_t> missing;
      for (int32_t r = 1; r < world_size_; ++r) {
        if (!peers_[size_t(r)].valid()) missing.push_back(r);
      }
      return fail(internal_error(
          fmt::format("socket group: rank 0 waited {} ms on {}:{}; ranks [{}] never checked in",
                      c.timeout.count(), c.addr.host, c.addr.port, fmt::join(missing, ", "))));
    }
    Hello h{};
    // A connection that says nothing (or not enough) is not one of ours: wait for the next. A
    // rank says hello as soon as it connects, so a few seconds is plenty, and a silent stranger
    // cannot hold up the ranks behind it for the whole timeout.
    const auto hello_by = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (!tcp::transfer(peer.fd(), &h, sizeof(h), false, hello_by, kWho, "hello").ok()) continue;
    if (std::string bad = hello_problem(h, c, peers_); !bad.empty()) {
      const Status refused = invalid_argument(fmt::format("socket group: {}", bad));
      send_error(peer.fd(), 0, refused, out_, std::min(deadline, Clock::now() + timeout_));
      return fail(refused);  // the ranks that checked in learn why too, instead of waiting
    }
    set_nodelay(peer.fd());
    peers_[size_t(h.rank)] = std::move(peer);
    ++joined;
  }
  for (int32_t r = 1; r < world_size_; ++r) {
    Verdict ok{0, 0, 0, 0};
    Status sent = tcp::transfer(peers_[size_t(r)].fd(), &ok, sizeof(ok), true, deadline, kWho,
                                fmt::format("accepting rank {}", r));
    if (!sent.ok()) return fail(sent);
  }
  return ok_status();
}

Status SocketGroup::join(const SocketGroupConfig& c) {
  const Clock::time_point deadline = Clock::now() + c.timeout;
  const std::string who = fmt::format("socket group: rank {}", rank_);
  DSA_ASSIGN_OR_RETURN(root_, tcp::connect_with_retry(c.addr, deadline, c.timeout, who));
  set_nodelay(root_.fd());
  Hello h{kMagic, kVersion, rank_, world_size_, c.flags_hash};
  DSA_RETURN_IF_ERROR(tcp::transfer(root_.fd(), &h, sizeof(h), true, deadline, who, "hello"));
  Verdict v{};
  DSA_RETURN_IF_ERROR(tcp::transfer(root_.fd(), &v, sizeof(v), false, deadline, who,
                                    "waiting for rank 0 to accept (it waits for every rank)"));
  if (v.code != 0) {
    return failed_precondition(fmt::format("socket group: rank 0 refused rank {}: {}", rank_,
                                           read_error_text(root_.fd(), v, deadline)));
  }
  return ok_status();
}

std::string SocketGroup::kind_text(uint32_t kind) {
  switch (Kind(kind)) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter_sum_bf16";
  }
  return fmt::format("<unknown kind {}>", kind);
}

// What a call's size counts, as the messages say it.
std::string_view SocketGroup::size_unit(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce:
      return "values";
    case Kind::kAllGather:
      return "bytes per rank";
    case Kind::kReduceScatter:
      return "values per rank";
  }
  return "?";
}

std::string SocketGroup::call_name(const Call& call) const {
  if (call.kind == Kind::kAllReduce) {
    return fmt::format("all_reduce #{} ({}, {} values)", calls_, reduce_op_name(call.op),
                       call.size);
  }
  return fmt::format("{} #{} ({} {})", kind_text(uint32_t(call.kind)), calls_, call.size,
                     size_unit(call.kind));
}

Status SocketGroup::fail(Status error) {
  if (broken_.ok()) broken_ = std::move(error);
  if (rank_ == 0) {
    // One short deadline for all: a peer that does not read gets no more than its kernel buffer.
    const Clock::time_point deadline =
        Clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(1));
    for (tcp::Socket& p : peers_) {
      if (p.valid()) send_error(p.fd(), calls_, broken_, out_, deadline);
      p = tcp::Socket();  // closed: a peer still sending or waiting fails now, not at its timeout
    }
  } else {
    root_ = tcp::Socket();
  }
  return broken_;
}

StatusOr<SocketGroup::Call> SocketGroup::begin(Kind kind, ReduceOp op, uint64_t size) {
  if (!broken_.ok()) return broken_;
  ++calls_;
  Call call{kind, op, size, 0, 0};
  const uint64_t world = uint64_t(world_size_);
  // Far beyond any memory; keeps the byte counts below from wrapping.
  if (size > std::numeric_limits<size_t>::max() / 8 / world) {
    return fail(invalid_argument(
        fmt::format("socket group: {}: the size is too large to send", call_name(call))));
  }
  switch (kind) {
    case Kind::kAllReduce:
      call.send_bytes = call.result_bytes = size * sizeof(int64_t);
      break;
    case Kind::kAllGather:
      call.send_bytes = size;
      call.result_bytes = size * world;
      break;
    case Kind::kReduceScatter:
      call.send_bytes = size * world * sizeof(bf16);
      call.result_bytes = size * sizeof(bf16);
      break;
  }
  return call;
}

Status SocketGroup::all_reduce(std::span<int64_t> values, ReduceOp op) {
  DSA_ASSIGN_OR_RETURN(const Call call, begin(Kind::kAllReduce, op, values.size()));
  if (world_size_ == 1) return ok_status();
  if (rank_ != 0) return peer_call(call, values.data(), values.data());
  for (int32_t r = 1; r < world_size_; ++r) {
    Incoming& in = incoming_[size_t(r)];
    in.values.resize(values.size());
    in.data = reinterpret_cast<uint8_t*>(in.values.data());
  }
  DSA_RETURN_IF_ERROR(root_collect(call));
  for (int32_t r = 1; r < world_size_; ++r) reduce_into(values, incoming_[size_t(r)].values, op);
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (int32_t r = 1; r < world_size_; ++r) {
    DSA_RETURN_IF_ERROR(root_answer(call, r, values.data(), deadline));
  }
  return ok_status();
}

Status SocketGroup::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  DSA_ASSIGN_OR_RETURN(const Call call, begin(Kind::kAllGather, ReduceOp::kSum, bytes_per_rank));
  if (rank_ != 0) return peer_call(call, send, recv);
  auto* out = static_cast<uint8_t*>(recv);
  if (bytes_per_rank > 0) std::memcpy(out, send, bytes_per_rank);
  if (world_size_ == 1) return ok_status();
  // Each peer's bytes go straight to their place in recv.
  for (int32_t r = 1; r < world_size_; ++r) {
    incoming_[size_t(r)].data = out + size_t(r) * bytes_per_rank;
  }
  DSA_RETURN_IF_ERROR(root_collect(call));
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (int32_t r = 1; r < world_size_; ++r) {
    DSA_RETURN_IF_ERROR(root_answer(call, r, out, deadline));
  }
  return ok_status();
}

Status SocketGroup::reduce_scatter_sum_bf16(const bf16* send, bf16* recv, size_t count) {
  DSA_ASSIGN_OR_RETURN(const Call call, begin(Kind::kReduceScatter, ReduceOp::kSum, count));
  if (world_size_ == 1) {
    const bf16* own[] = {send};
    sum_bf16_blocks(own, count, recv);  // as LocalDeviceGroup's world size 1
    return ok_status();
  }
  if (rank_ != 0) return peer_call(call, send, recv);
  for (int32_t r = 1; r < world_size_; ++r) {
    Incoming& in = incoming_[size_t(r)];
    in.blocks.resize(size_t(world_size_) * count);
    in.data = reinterpret_cast<uint8_t*>(in.blocks.data());
  }
  DSA_RETURN_IF_ERROR(root_collect(call));
  // Rank r's block of the sum: block r of every rank's send, in rank order (sum_bf16_blocks, as
  // LocalDeviceGroup adds them). The peers' first, so they go on while rank 0 sums its own.
  parts_.resize(size_t(world_size_));
  auto sum_block = [&](int32_t r, bf16* out) {
    for (int32_t q = 0; q < world_size_; ++q) {
      parts_[size_t(q)] = (q == 0 ? send : incoming_[size_t(q)].blocks.data()) + size_t(r) * count;
    }
    sum_bf16_blocks(parts_, count, out);
  };
  sum_.resize(count);
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (int32_t r = 1; r < world_size_; ++r) {
    sum_block(r, sum_.data());
    DSA_RETURN_IF_ERROR(root_answer(call, r, sum_.data(), deadline));
  }
  sum_block(0, recv);
  return ok_status();
}

Status SocketGroup::receive_from(int32_t r, const Call& call, bool* done) {
  static_assert(sizeof(Incoming::header) == sizeof(CallHeader));
  Incoming& in = incoming_[size_t(r)];
  const int fd = peers_[size_t(r)].fd();
  auto io_error = [&](Io io) {
    return internal_error(fmt::format(
        "socket group: {}: rank {} {}", call_name(call), r,
        io == Io::kClosed ? "closed its connection (its process exited or its group broke)"
                          : "could not be read from: " + tcp::errno_text()));
  };
  if (Io io = read_available(fd, in.header, sizeof(in.header), &in.header_got);
      io != Io::kComplete) {
    return io == Io::kWouldBlock ? ok_status() : io_error(io);
  }
  if (!in.checked) {
    CallHeader h;
    std::memcpy(&h, in.header, sizeof(h));
    std::string differs;
    if (h.seq != calls_) {
      differs = fmt::format("rank {} is at collective #{}, rank 0 at #{}", r, h.seq, calls_);
    } else if (h.kind != uint32_t(call.kind)) {
      differs = fmt::format("rank {} made a call of kind {}, rank 0 of kind {}", r,
                            kind_text(h.kind), kind_text(uint32_t(call.kind)));
    } else if (call.kind == Kind::kAllReduce && h.op != uint32_t(call.op)) {
      differs = fmt::format("rank {} called it with op {}, rank 0 with {}", r, op_text(h.op),
                            reduce_op_name(call.op));
    } else if (h.size != call.size) {
      differs = fmt::format("rank {} called it with {} {}, rank 0 with {}", r, h.size,
                            size_unit(call.kind), call.size);
    }
    if (!differs.empty()) {
      return failed_precondition(fmt::format(
          "socket group: {}: {}: the ranks are not making the same call (SPEC.md §9 bug class 10)",
          call_name(call), differs));
    }
    in.checked = true;
  }
  if (Io io = read_available(fd, in.data, call.send_bytes, &in.data_got); io != Io::kComplete) {
    return io == Io::kWouldBlock ? ok_status() : io_error(io);
  }
  *done = true;
  return ok_status();
}

Status SocketGroup::root_collect(const Call& call) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (Incoming& in : incoming_) {
    in.header_got = in.data_got = 0;
    in.checked = in.done = false;
  }
  incoming_[0].done = true;
  std::vector<pollfd> fds;
  std::vector<int32_t> ranks;
  for (int32_t pending = world_size_ - 1; pending > 0;) {
    fds.clear();
    ranks.clear();
    for (int32_t r = 1; r < world_size_; ++r) {
      if (incoming_[size_t(r)].done) continue;
      fds.push_back({peers_[size_t(r)].fd(), POLLIN, 0});
      ranks.push_back(r);
    }
    const int ready = ::poll(fds.data(), fds.size(), tcp::ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      return fail(internal_error(
          fmt::format("socket group: {}: poll: {}", call_name(call), tcp::errno_text())));
    }
    if (ready == 0) {
      std::vector<int32_t> here, missing;
      for (int32_t r = 0; r < world_size_; ++r) {
        (incoming_[size_t(r)].done ? here : missing).push_back(r);
      }
      return fail(internal_error(fmt::format(
          "socket group: watchdog: rank 0 waited {} ms in {}; ranks [{}] arrived, ranks [{}] did "
          "not answer (a rank skipped a collective or took a branch the others did not, SPEC.md "
          "§7)",
          timeout_.count(), call_name(call), fmt::join(here, ", "), fmt::join(missing, ", "))));
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int32_t r = ranks[i];
      bool done = false;
      if (Status s = receive_from(r, call, &done); !s.ok()) return fail(s);
      if (!done) continue;
      incoming_[size_t(r)].done = true;
      --pending;
    }
  }
  return ok_status();
}

Status SocketGroup::root_answer(const Call& call, int32_t r, const void* result,
                                Clock::time_point deadline) {
  Status sent =
      send_message(peers_[size_t(r)].fd(), Verdict{calls_, call.size, 0, uint32_t(call.kind)},
                   result, call.result_bytes, out_, deadline, kWho,
                   fmt::format("{}: sending the result to rank {}", call_name(call), r));
  return sent.ok() ? sent : fail(sent);
}

Status SocketGroup::peer_call(const Call& call, const void* send, void* result) {
  const Clock::time_point start = Clock::now();
  // Rank 0 is the watchdog; the grace lets its verdict, which names the rank it waited for,
  // arrive before this rank's own deadline says only that rank 0 did not answer.
  const Clock::time_point deadline =
      start + timeout_ + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5));
  const std::string who = fmt::format("socket group: rank {}", rank_);
  const std::string name = call_name(call);
  const int fd = root_.fd();
  Status sent = send_message(
      fd, CallHeader{calls_, call.size, uint32_t(call.kind), uint32_t(call.op)}, send,
      call.send_bytes, out_, start + timeout_, who, fmt::format("{}: sending to rank 0", name));
  Verdict v{};
  // When the send failed, rank 0 may have broken the group already: its reason, if it is here
  // now, says more than the failed send.
  Status got = tcp::transfer(fd, &v, sizeof(v), false, sent.ok() ? deadline : Clock::now(), who,
                             fmt::format("{}: waiting for rank 0's result", name));
  if (!got.ok()) {
    if (!sent.ok()) return fail(sent);
    return fail(internal_error(fmt::format(
        "{} (rank 0 gathers every rank's data and answers; it did not within {} ms)", got.message(),
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count())));
  }
  if (v.code != 0) {
    return fail(
        status_from_verdict(v.code, fmt::format("{}: {}: rank 0 broke the group: {}", who, name,
                                                read_error_text(fd, v, Clock::now() + timeout_))));
  }
  if (v.seq != calls_ || v.kind != uint32_t(call.kind) || v.count != call.size) {
    return fail(internal_error(fmt::format("{}: {}: rank 0 answered {} #{} of size {}", who, name,
                                           kind_text(v.kind), v.seq, v.count)));
  }
  if (!sent.ok()) return fail(sent);  // rank 0 cannot have a result without this rank's data
  Status read = tcp::transfer(fd, result, call.result_bytes, false, deadline, who,
                              fmt::format("{}: receiving rank 0's result", name));
  if (!read.ok()) return fail(read);
  return ok_status();
}

}  // namespace dsa::dist
