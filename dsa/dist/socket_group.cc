#include "dsa/dist/socket_group.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace dsa::dist {

namespace {

using tcp::Clock;

constexpr std::string_view kWho = "socket group";
constexpr uint32_t kMagic = 0x44534147;  // "DSAG": not the bootstrap's "DSAB"
constexpr uint32_t kVersion = 1;
// Rank 0's error text as sent to the peers; longer is cut (it only has to name what went wrong).
constexpr size_t kMaxMessageBytes = 4096;

// A peer's first message.
struct Hello {
  uint32_t magic, version;
  int32_t rank, world_size;
  uint64_t flags_hash;
};
// A peer's part of one all_reduce; `count` int64 values follow.
struct CallHeader {
  int64_t seq;  // 1 for the first all_reduce
  uint64_t count;
  uint32_t op;  // ReduceOp
  uint32_t reserved;
};
// Rank 0's answer to a hello (seq 0) or to an all_reduce: code 0 and `count` values (none for a
// hello), or a StatusCode and `count` bytes of rank 0's error message.
struct Verdict {
  int64_t seq;
  uint64_t count;
  uint32_t code;
  uint32_t reserved;
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

std::string SocketGroup::call_name(ReduceOp op, size_t count) const {
  return fmt::format("all_reduce #{} ({}, {} values)", calls_, reduce_op_name(op), count);
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

Status SocketGroup::all_reduce(std::span<int64_t> values, ReduceOp op) {
  if (!broken_.ok()) return broken_;
  ++calls_;
  if (world_size_ == 1) return ok_status();
  return rank_ == 0 ? root_all_reduce(values, op) : peer_all_reduce(values, op);
}

Status SocketGroup::receive_from(int32_t r, ReduceOp op, size_t count, bool* done) {
  static_assert(sizeof(Incoming::header) == sizeof(CallHeader));
  Incoming& in = incoming_[size_t(r)];
  const int fd = peers_[size_t(r)].fd();
  auto io_error = [&](Io io) {
    return internal_error(fmt::format(
        "socket group: {}: rank {} {}", call_name(op, count), r,
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
      differs = fmt::format("rank {} is at all_reduce #{}, rank 0 at #{}", r, h.seq, calls_);
    } else if (h.op != uint32_t(op)) {
      differs = fmt::format("rank {} called it with op {}, rank 0 with {}", r, op_text(h.op),
                            reduce_op_name(op));
    } else if (h.count != count) {
      differs = fmt::format("rank {} called it with {} values, rank 0 with {}", r, h.count, count);
    }
    if (!differs.empty()) {
      return failed_precondition(fmt::format(
          "socket group: {}: {}: the ranks are not making the same call (SPEC.md §9 bug class 10)",
          call_name(op, count), differs));
    }
    in.values.resize(count);
    in.checked = true;
  }
  if (Io io = read_available(fd, in.values.data(), count * sizeof(int64_t), &in.values_got);
      io != Io::kComplete) {
    return io == Io::kWouldBlock ? ok_status() : io_error(io);
  }
  *done = true;
  return ok_status();
}

Status SocketGroup::root_all_reduce(std::span<int64_t> values, ReduceOp op) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  for (Incoming& in : incoming_) {  // keeps each value buffer's capacity from the last call
    in.header_got = in.values_got = 0;
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
      return fail(internal_error(fmt::format("socket group: {}: poll: {}",
                                             call_name(op, values.size()), tcp::errno_text())));
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
          timeout_.count(), call_name(op, values.size()), fmt::join(here, ", "),
          fmt::join(missing, ", "))));
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int32_t r = ranks[i];
      bool done = false;
      if (Status s = receive_from(r, op, values.size(), &done); !s.ok()) return fail(s);
      if (!done) continue;
      incoming_[size_t(r)].done = true;
      reduce_into(values, incoming_[size_t(r)].values, op);
      --pending;
    }
  }
  build(out_, Verdict{calls_, values.size(), 0, 0}, values.data(), values.size());
  const Clock::time_point send_deadline = Clock::now() + timeout_;
  for (int32_t r = 1; r < world_size_; ++r) {
    Status sent = tcp::transfer(
        peers_[size_t(r)].fd(), out_.data(), out_.size(), true, send_deadline, kWho,
        fmt::format("{}: sending the result to rank {}", call_name(op, values.size()), r));
    if (!sent.ok()) return fail(sent);
  }
  return ok_status();
}

Status SocketGroup::peer_all_reduce(std::span<int64_t> values, ReduceOp op) {
  const Clock::time_point start = Clock::now();
  // Rank 0 is the watchdog; the grace lets its verdict, which names the rank it waited for,
  // arrive before this rank's own deadline says only that rank 0 did not answer.
  const Clock::time_point deadline =
      start + timeout_ + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5));
  const std::string who = fmt::format("socket group: rank {}", rank_);
  const std::string call = call_name(op, values.size());
  const int fd = root_.fd();
  build(out_, CallHeader{calls_, values.size(), uint32_t(op), 0}, values.data(), values.size());
  Status sent = tcp::transfer(fd, out_.data(), out_.size(), true, start + timeout_, who,
                              fmt::format("{}: sending to rank 0", call));
  Verdict v{};
  // When the send failed, rank 0 may have broken the group already: its reason, if it is here
  // now, says more than the failed send.
  Status got = tcp::transfer(fd, &v, sizeof(v), false, sent.ok() ? deadline : Clock::now(), who,
                             fmt::format("{}: waiting for rank 0's result", call));
  if (!got.ok()) {
    if (!sent.ok()) return fail(sent);
    return fail(internal_error(fmt::format(
        "{} (rank 0 gathers every rank's values and answers; it did not within {} ms)",
        got.message(),
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count())));
  }
  if (v.code != 0) {
    return fail(
        status_from_verdict(v.code, fmt::format("{}: {}: rank 0 broke the group: {}", who, call,
                                                read_error_text(fd, v, Clock::now() + timeout_))));
  }
  if (v.seq != calls_ || v.count != values.size()) {
    return fail(internal_error(fmt::format("{}: {}: rank 0 answered all_reduce #{} with {} values",
                                           who, call, v.seq, v.count)));
  }
  if (!sent.ok()) return fail(sent);  // rank 0 cannot have a result without this rank's values
  Status read = tcp::transfer(fd, values.data(), values.size_bytes(), false, deadline, who,
                              fmt::format("{}: receiving rank 0's result", call));
  if (!read.ok()) return fail(read);
  return ok_status();
}

}  // namespace dsa::dist
