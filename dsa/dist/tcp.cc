#include "dsa/dist/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

namespace dsa::dist::tcp {

namespace {

StatusOr<addrinfo*> resolve(const InitAddr& a, bool passive, std::string_view who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int e = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); e != 0) {
    return invalid_argument(
        fmt::format("{}: dist-init-addr {}:{}: {}", who, a.host, a.port, gai_strerror(e)));
  }
  return res;
}

Socket nonblocking_socket(const addrinfo* ai) {
  return Socket(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(left) : 0;
}

std::string errno_text() { return std::strerror(errno); }

Status transfer(int fd, void* buf, size_t n, bool send, Clock::time_point deadline,
                std::string_view who, std::string_view what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    pollfd pfd{fd, short(send ? POLLOUT : POLLIN), 0};
    const int ready = ::poll(&pfd, 1, ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return internal_error(fmt::format("{}: {}: timed out", who, what));
    const ssize_t got = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got < 0) return internal_error(fmt::format("{}: {}: {}", who, what, errno_text()));
    if (got == 0) return internal_error(fmt::format("{}: {}: the peer closed", who, what));
    p += got;
    n -= size_t(got);
  }
  return ok_status();
}

StatusOr<Socket> listen_on(const InitAddr& addr, int backlog, std::string_view who) {
  DSA_ASSIGN_OR_RETURN(addrinfo * ai, resolve(addr, true, who));
  Socket listener = nonblocking_socket(ai);
  bool bound = false;
  if (listener.valid()) {
    const int one = 1;
    ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bound = ::bind(listener.fd(), ai->ai_addr, ai->ai_addrlen) == 0 &&
            ::listen(listener.fd(), backlog) == 0;
  }
  const std::string why = errno_text();  // of the call that failed, before freeaddrinfo
  ::freeaddrinfo(ai);
  if (!bound) {
    return internal_error(
        fmt::format("{}: rank 0 cannot listen on {}:{}: {}", who, addr.host, addr.port, why));
  }
  return listener;
}

Socket accept_until(const Socket& listener, Clock::time_point deadline) {
  for (;;) {
    pollfd pfd{listener.fd(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return Socket();
    // A connection that was reset before we took it is not an error of ours: wait for the next.
    Socket peer(::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer.valid()) return peer;
  }
}

StatusOr<Socket> connect_with_retry(const InitAddr& addr, Clock::time_point deadline,
                                    std::chrono::milliseconds timeout, std::string_view who) {
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    DSA_ASSIGN_OR_RETURN(addrinfo * ai, resolve(addr, false, who));
    Socket s = nonblocking_socket(ai);
    int rc = s.valid() ? ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) : -1;
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
      fmt::format("{} could not reach rank 0 at {}:{} within {} ms (last error: {})", who,
                  addr.host, addr.port, timeout.count(), last));
}

StatusOr<int32_t> free_loopback_port() {
  Socket fd(::socket(AF_INET, SOCK_STREAM, 0));
  if (!fd.valid())
    return internal_error(fmt::format("no socket for a free port: {}", errno_text()));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd.fd(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return internal_error(fmt::format("no free port on 127.0.0.1: {}", errno_text()));
  }
  return int32_t(ntohs(a.sin_port));
}

}  // namespace dsa::dist::tcp
