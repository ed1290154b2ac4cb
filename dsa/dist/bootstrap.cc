#include "dsa/dist/bootstrap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dsa/dist/tcp.h"

namespace dsa::dist {

namespace {

using tcp::Clock;
using tcp::Socket;

constexpr std::string_view kWho = "bootstrap";

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

void send_reply(int fd, uint32_t code, const void* payload, size_t n, Clock::time_point deadline) {
  Reply r{};
  r.code = code;
  std::memcpy(r.payload, payload, std::min(n, sizeof(r.payload) - 1));
  // Best effort: a peer that went away already needs no answer.
  (void)tcp::transfer(fd, &r, sizeof(r), true,
                      std::min(deadline, Clock::now() + std::chrono::seconds(1)), kWho, "reply");
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
  DSA_ASSIGN_OR_RETURN(Socket listener, tcp::listen_on(c.addr, c.world_size, kWho));
  std::vector<Socket> peers;
  std::vector<uint8_t> seen(size_t(c.world_size), 0);
  seen[0] = 1;
  while (int32_t(peers.size()) < c.world_size - 1) {
    Socket peer = tcp::accept_until(listener, deadline);
    if (!peer.valid()) {
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
    Hello h{};
    if (!tcp::transfer(peer.fd(), &h, sizeof(h), false, deadline, kWho, "hello").ok()) continue;
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

StatusOr<NcclId> join(const BootstrapConfig& c) {
  const Clock::time_point deadline = Clock::now() + c.timeout;
  DSA_ASSIGN_OR_RETURN(Socket s,
                       tcp::connect_with_retry(c.addr, deadline, c.timeout,
                                               fmt::format("bootstrap: rank {}", c.rank)));
  Hello h{kMagic, kVersion, c.rank, c.world_size, c.flags_hash};
  DSA_RETURN_IF_ERROR(tcp::transfer(s.fd(), &h, sizeof(h), true, deadline, kWho, "hello"));
  Reply r{};
  Status got = tcp::transfer(s.fd(), &r, sizeof(r), false, deadline, kWho, "waiting for the id");
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
