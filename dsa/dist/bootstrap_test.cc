// The bootstrap on loopback with several processes (fork): ranks 1.. start before rank 0 listens
// and retry; every rank gets rank 0's id bytes; a rank with other flags, a rank that checks in
// twice and a rank that never comes are refused on every rank with their reason, within the
// timeout — never a hang.
#include "dsa/dist/bootstrap.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "dsa/dist/tcp.h"
#include "dsa/testing/watchdog.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;

// A port that was free a moment ago (the kernel's pick for port 0).
int32_t free_port() {
  StatusOr<int32_t> port = tcp::free_loopback_port();
  DSA_CHECK(port.ok());
  return *port;
}

NcclId fake_id() {
  NcclId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(i * 37 + 11);
  return id;
}

enum ChildExit { kGotTheId = 0, kWrongId = 2, kRefused = 3 };

struct Peer {
  int32_t rank;
  uint64_t flags_hash;
};

// Forks one process per peer (each runs the bootstrap as that rank and exits with a ChildExit),
// then runs rank 0 here. Returns rank 0's result and each child's exit code.
std::pair<StatusOr<NcclId>, std::vector<int>> run(int32_t world, const std::vector<Peer>& peers,
                                                  std::chrono::milliseconds timeout) {
  BootstrapConfig c;
  c.addr = {"127.0.0.1", free_port()};
  c.world_size = world;
  c.flags_hash = 0xF1A9;
  c.timeout = timeout;
  std::vector<pid_t> pids;
  for (const Peer& p : peers) {
    const pid_t pid = ::fork();
    DSA_CHECK(pid >= 0);
    if (pid == 0) {
      BootstrapConfig mine = c;
      mine.rank = p.rank;
      mine.flags_hash = p.flags_hash;
      auto got = exchange_unique_id(mine, NcclId{});
      ::_exit(!got.ok() ? kRefused : *got == fake_id() ? kGotTheId : kWrongId);
    }
    pids.push_back(pid);
  }
  std::this_thread::sleep_for(100ms);  // the peers start first: they must retry, not give up
  c.rank = 0;
  auto root = exchange_unique_id(c, fake_id());
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  return {std::move(root), codes};
}

TEST(Bootstrap, FourProcessesOnTwoNodesGetRankZerosId) {
  dsa::testing::within_seconds(30, [] {
    // Two "nodes" of two ranks: global ranks 2 and 3 are node 1's local ranks 0 and 1.
    auto [root, codes] = run(4, {{1, 0xF1A9}, {2, 0xF1A9}, {3, 0xF1A9}}, 10000ms);
    ASSERT_TRUE(root.ok()) << root.status().to_string();
    EXPECT_EQ(*root, fake_id());
    EXPECT_EQ(codes, (std::vector<int>{kGotTheId, kGotTheId, kGotTheId}));
  });
}

TEST(Bootstrap, ARankWithOtherFlagsIsRefusedEverywhere) {
  dsa::testing::within_seconds(30, [] {
    auto [root, codes] = run(3, {{1, 0xF1A9}, {2, 0xBAD}}, 3000ms);
    ASSERT_FALSE(root.ok());
    EXPECT_NE(root.status().message().find("rank 2 runs with other flags"), std::string::npos)
        << root.status().to_string();
    EXPECT_EQ(codes, (std::vector<int>{kRefused, kRefused}));
  });
}

TEST(Bootstrap, ARankThatChecksInTwiceIsRefused) {
  dsa::testing::within_seconds(30, [] {
    auto [root, codes] = run(3, {{1, 0xF1A9}, {1, 0xF1A9}}, 3000ms);
    ASSERT_FALSE(root.ok());
    EXPECT_NE(root.status().message().find("rank 1 checked in twice"), std::string::npos)
        << root.status().to_string();
    EXPECT_EQ(codes, (std::vector<int>{kRefused, kRefused}));
  });
}

TEST(Bootstrap, AMissingRankEndsEveryoneAtTheTimeout) {
  dsa::testing::within_seconds(30, [] {
    auto [root, codes] = run(3, {{2, 0xF1A9}}, 600ms);
    ASSERT_FALSE(root.ok());
    EXPECT_NE(root.status().message().find("ranks [1] never checked in"), std::string::npos)
        << root.status().to_string();
    EXPECT_EQ(codes, (std::vector<int>{kRefused}));
  });
}

TEST(Bootstrap, NobodyListeningIsAnErrorNotAHang) {
  BootstrapConfig c;
  c.addr = {"127.0.0.1", free_port()};
  c.rank = 1;
  c.world_size = 2;
  c.timeout = 200ms;
  auto got = exchange_unique_id(c, NcclId{});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("could not reach rank 0 at 127.0.0.1:"), std::string::npos)
      << got.status().to_string();
}

TEST(Bootstrap, ParsesAndChecksTheAddress) {
  auto a = parse_init_addr("node0.cluster:29500");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "node0.cluster");
  EXPECT_EQ(a->port, 29500);
  auto v6 = parse_init_addr("[::1]:7");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  for (const char* bad : {"nohost", ":80", "h:0", "h:65536", "h:12a", "h:"}) {
    auto r = parse_init_addr(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().to_string();
  }
  BootstrapConfig c;
  c.rank = 3;
  c.world_size = 2;
  EXPECT_NE(exchange_unique_id(c, NcclId{}).status().message().find("rank = 3, world_size = 2"),
            std::string::npos);
}

}  // namespace
}  // namespace dsa::dist
