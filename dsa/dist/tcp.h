// The TCP pieces that rank 0's services share (the NCCL-id bootstrap, bootstrap.h, and the CPU
// process group, socket_group.h): name resolution, a listening socket, accept and connect by a
// deadline (connect retries while rank 0 is not listening yet), and moving exactly n bytes by a
// deadline. Every socket is non-blocking and every wait is a poll() with the time left, so no
// rank can hang on a peer that died or never came; send() uses MSG_NOSIGNAL, so a peer that went
// away is an error, not a SIGPIPE. Host code only.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "dsa/core/status.h"
#include "dsa/dist/bootstrap.h"

namespace dsa::dist::tcp {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor (-1: none); closes it when destroyed.
class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Milliseconds until `deadline`, 0 once it passed (a poll() timeout).
int ms_left(Clock::time_point deadline);

// strerror(errno).
std::string errno_text();

// Moves exactly n bytes over the non-blocking socket `fd` (poll for readiness) or fails by the
// deadline. Errors read "<who>: <what>: timed out", "...: the peer closed" or "...: <errno text>".
Status transfer(int fd, void* buf, size_t n, bool send, Clock::time_point deadline,
                std::string_view who, std::string_view what);

// A non-blocking socket bound to `addr` (SO_REUSEADDR) and listening. InvalidArgument
// "<who>: dist-init-addr host:port: <why>" for a name that does not resolve, Internal
// "<who>: rank 0 cannot listen on host:port: <why>" when the bind or listen fails.
StatusOr<Socket> listen_on(const InitAddr& addr, int backlog, std::string_view who);

// The next connection on `listener` (non-blocking, close-on-exec), or an invalid Socket once the
// deadline passed.
Socket accept_until(const Socket& listener, Clock::time_point deadline);

// A non-blocking socket connected to `addr`, retrying every 20 ms while nobody listens there yet
// (rank 0 may start after the others). Internal "<who> could not reach rank 0 at host:port within
// <timeout> ms (last error: <why>)" once the deadline passed; `timeout` only words the message.
StatusOr<Socket> connect_with_retry(const InitAddr& addr, Clock::time_point deadline,
                                    std::chrono::milliseconds timeout, std::string_view who);

// A port the kernel called free on 127.0.0.1 a moment ago (its pick for port 0): for a run on one
// node that was given no address, and for tests. Someone may take it before it is bound again, so
// a bind on it can still fail, by name. Internal when no socket can be opened or bound.
StatusOr<int32_t> free_loopback_port();

}  // namespace dsa::dist::tcp
