#include "dsa/dist/bootstrap.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace dsa::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x44534142;  // "DSAB"
constexpr uint32_t kVersion = 1;
constexpr size_t kMessageBytes = 256;

struct Hello {
  uint32_t magic, version;
  int32_t rank, world_size;
  uint64_t flags_hash;
};
struct Reply {
  uint32_t code;                   // 0: the id follows; else a message from rank 0
  uint8_t payload[kMessageBytes];  // id (kNcclIdBytes) or a NUL-terminated message
};

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(left) : 0;
}

std::string errno_text() { return std::strerror(errno); }

// Moves exactly n bytes (non-blocking socket, poll for readiness) or fails by the deadline.
Status transfer(int fd, void* buf, size_t n, bool send, Clock::time_point deadline,
                std::string_view what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    pollfd pfd{fd, short(send ? POLLOUT : POLLIN), 0};
    const int ready = ::poll(&pfd, 1, ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return internal_error(fmt::format("bootstrap: {}: timed out", what));
    const ssize_t got = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got < 0) return internal_error(fmt::format("bootstrap: {}: {}", what, errno_text()));
    if (got == 0) return internal_error(fmt::format("bootstrap: {}: the peer closed", what));
    p += got;
    n -= size_t(got);
  }
  return ok_status();
}

StatusOr<addrinfo*> resolve(const InitAddr& a, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int e = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); e != 0) {
    return invalid_argument(
        fmt::format("bootstrap: dist-init-addr {}:{}: {}", a.host, a.port, gai_strerror(e)));
  }
  return res;
}

Socket nonblocking_socket(const addrinfo* ai) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  return s;
}

void send_reply(int fd, uint32_t code, const void* payload, size_t n, Clock::time_point deadline) {
  Reply r{};
  r.code = code;
  std::memcpy(r.payload, payload, std::min(n, sizeof(r.payload) - 1));
  // Best effort: a peer that went away already needs no answer.
  (void)transfer(fd, &r, sizeof(r), true,
                 std::min(deadline, Clock::now() + std::chrono::seconds(1)), "reply");
}

// Rank 0's refusal: the reason goes to every rank that checked in, so none waits for an id.
Status refuse(std::vector<Socket>& peers, Status why, Clock::time_point deadline) {
  for (const Socket& p : peers) {
    send_reply(p.fd(), 1, why.message().data(), why.message().size(), deadline);
  }
  return why;
}

StatusOr<NcclId> serve(const BootstrapConfig& c, const NcclId& id) {
  const Clock::time_point deadline = Clock::now() + c.timeout;
  DSA_ASSIGN_OR_RETURN(addrinfo * ai, resolve(c.addr, true));
  Socket listener = nonblocking_socket(ai);
  const int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = listener.fd() >= 0 &&
                     ::bind(listener.fd(), ai->ai_addr, ai->ai_addrlen) == 0 &&
                     ::listen(listener.fd(), c.world_size) == 0;
  ::freeaddrinfo(ai);
  if (!bound) {
    return internal_error(fmt::format("bootstrap: rank 0 cannot listen on {}:{}: {}", c.addr.host,
                                      c.addr.port, errno_text()));
  }
  std::vector<Socket> peers;
  std::vector<uint8_t> seen(size_t(c.world_size), 0);
  seen[0] = 1;
  while (int32_t(peers.size()) < c.world_size - 1) {
    pollfd pfd{listener.fd(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      std::vector<int32_t> missing;
      for (int32_t r = 0; r < c.world_size; ++r) {
        if (!seen[size_t(r)]) missing.push_back(r);
      }
      return refuse(peers,
                    internal_error(fmt::format(
                        "bootstrap: rank 0 waited {} ms on {}:{}; ranks [{}] never checked in",
                        c.timeout.count(), c.addr.host, c.addr.port, fmt::join(missing, ", "))),
                    deadline);
    }
    Socket peer(::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer.fd() < 0) continue;
    Hello h{};
    if (!transfer(peer.fd(), &h, sizeof(h), false, deadline, "hello").ok()) continue;
    std::string bad;
    if (h.magic != kMagic || h.version != kVersion) {
      bad = fmt::format("a peer that is not a dsa bootstrap of version {} connected", kVersion);
    } else if (h.world_size != c.world_size) {
      bad = fmt::format("rank {} was started with world size {}, rank 0 with {}", h.rank,
                        h.world_size, c.world_size);
    } else if (h.rank < 1 || h.rank >= c.world_size) {
      bad = fmt::format("rank {} is outside [1, {})", h.rank, c.world_size);
    } else if (seen[size_t(h.rank)]) {
      bad = fmt::format("rank {} checked in twice", h.rank);
    } else if (h.flags_hash != c.flags_hash) {
      bad = fmt::format(
          "rank {} runs with other flags (hash {:#x}, rank 0 has {:#x}): every rank must be "
          "started with the same flags",
          h.rank, h.flags_hash, c.flags_hash);
    }
    if (!bad.empty()) {
      peers.push_back(std::move(peer));
      return refuse(peers, invalid_argument("bootstrap: " + bad), deadline);
    }
    seen[size_t(h.rank)] = 1;
    peers.push_back(std::move(peer));
  }
  for (const Socket& p : peers) send_reply(p.fd(), 0, id.data(), id.size(), deadline);
  return id;
}

// Connects to rank 0, retrying while it is not listening yet.
StatusOr<Socket> connect_to_root(const BootstrapConfig& c, Clock::time_point deadline) {
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    DSA_ASSIGN_OR_RETURN(addrinfo * ai, resolve(c.addr, false));
    Socket s = nonblocking_socket(ai);
    int rc = s.fd() < 0 ? -1 : ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
    ::freeaddrinfo(ai);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{s.fd(), POLLOUT, 0};
      int err = ETIMEDOUT;  // what it is if poll gives up before the connection resolves
      socklen_t len = sizeof(err);
      if (::poll(&pfd, 1, ms_left(deadline)) == 1) {
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) return s;
    last = errno_text();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return internal_error(
      fmt::format("bootstrap: rank {} could not reach rank 0 at {}:{} within {} "
                  "ms (last error: {})",
                  c.rank, c.addr.host, c.addr.port, c.timeout.count(), last));
}

StatusOr<NcclId> join(const BootstrapConfig& c) {
  const Clock::time_point deadline = Clock::now() + c.timeout;
  DSA_ASSIGN_OR_RETURN(Socket s, connect_to_root(c, deadline));
  Hello h{kMagic, kVersion, c.rank, c.world_size, c.flags_hash};
  DSA_RETURN_IF_ERROR(transfer(s.fd(), &h, sizeof(h), true, deadline, "hello"));
  Reply r{};
  Status got = transfer(s.fd(), &r, sizeof(r), false, deadline, "waiting for the id");
  if (!got.ok()) {
    return internal_error(
        fmt::format("{} (rank {}; rank 0 waits for every rank)", got.message(), c.rank));
  }
  if (r.code != 0) {
    r.payload[kMessageBytes - 1] = 0;
    return failed_precondition(fmt::format("bootstrap: rank 0 refused rank {}: {}", c.rank,
                                           reinterpret_cast<const char*>(r.payload)));
  }
  NcclId id;
  std::memcpy(id.data(), r.payload, id.size());
  return id;
}

}  // namespace

StatusOr<InitAddr> parse_init_addr(std::string_view text) {
  const size_t colon = text.rfind(':');
  auto bad = [&](std::string_view why) {
    return invalid_argument(fmt::format("dist-init-addr = '{}': {}", text, why));
  };
  if (colon == std::string_view::npos || colon == 0) return bad("expected host:port");
  const std::string_view port = text.substr(colon + 1);
  int64_t value = 0;
  if (port.empty() || port.size() > 5) return bad("the port must be a number in [1, 65535]");
  for (char ch : port) {
    if (ch < '0' || ch > '9') return bad("the port must be a number in [1, 65535]");
    value = value * 10 + (ch - '0');
  }
  if (value < 1 || value > 65535) return bad("the port must be a number in [1, 65535]");
  std::string_view host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:port
  }
  return InitAddr{std::string(host), int32_t(value)};
}

StatusOr<NcclId> exchange_unique_id(const BootstrapConfig& c, const NcclId& id) {
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size) {
    return invalid_argument(
        fmt::format("bootstrap: rank = {}, world_size = {}: need 0 <= rank < "
                    "world_size",
                    c.rank, c.world_size));
  }
  if (c.timeout.count() <= 0) {
    return invalid_argument(
        fmt::format("bootstrap: timeout = {} ms: must be > 0", c.timeout.count()));
  }
  if (c.world_size == 1) return id;
  return c.rank == 0 ? serve(c, id) : join(c);
}

}  // namespace dsa::dist
