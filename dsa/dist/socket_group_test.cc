// The TCP process group with one process per rank (fork) on 127.0.0.1: reductions are exact over
// consecutive calls of every size (the empty one included) with ranks that start before rank 0
// listens; all_gather lands every rank's bytes in rank order (0 bytes and megabytes included) and
// reduce_scatter_sum_bf16 gives LocalDeviceGroup's bits for the same inputs, both interleaved
// with all_reduce on one call count; world size 1 opens no socket; the caller bugs NCCL would hang
// on (a call of another kind or size, a rank that never calls, a rank that exits) and a rank with
// other flags come back as errors naming the rank on every rank, within the timeout, and a broken
// group stays broken for every kind of call.
//
// Each rank runs in its own child process and reports through its exit code (kOk, or the check
// that failed, with the reason on stderr); the parent checks every rank's code.
#include "dsa/dist/socket_group.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsa/dist/local_device_group.h"
#include "dsa/testing/watchdog.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A port that was free a moment ago (the kernel's pick for port 0).
int32_t free_port() {
  StatusOr<int32_t> port = tcp::free_loopback_port();
  DSA_CHECK(port.ok());
  return *port;
}

// A rank's exit code: kOk, or which of its checks failed.
enum RankExit {
  kOk = 0,
  kCreateFailed = 10,
  kCreateSucceeded,
  kCallFailed,
  kCallSucceeded,
  kWrongResult,
  kWrongMessage,
  kNotBrokenForGood,
  kWrongTiming,
};

// In a child: ends the rank's checks with `code`, saying why on stderr (unbuffered: the child
// leaves through _exit).
int failed(RankExit code, int32_t rank, const std::string& why) {
  std::fprintf(stderr, "rank %d (exit %d): %s\n", rank, int(code), why.c_str());
  return code;
}

bool contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// A rank's part of a test, run in its own process; returns its RankExit.
using RankBody = std::function<int(const SocketGroupConfig&)>;

// Forks one process per rank, in `order`, `stagger` apart; every rank gets the same address,
// flags hash and timeout. Returns the exit codes by rank (-signal for a rank that was killed).
std::vector<int> run_world(int32_t world, std::chrono::milliseconds timeout,
                           const std::vector<int32_t>& order, std::chrono::milliseconds stagger,
                           const RankBody& body) {
  SocketGroupConfig c;
  c.addr = {"127.0.0.1", free_port()};
  c.world_size = world;
  c.flags_hash = 0xF1A9;
  c.timeout = timeout;
  std::vector<pid_t> pids(size_t(world), -1);
  for (int32_t r : order) {
    const pid_t pid = ::fork();
    DSA_CHECK(pid >= 0);
    if (pid == 0) {
      ::alarm(20);  // a rank that hangs dies instead of hanging the suite
      SocketGroupConfig mine = c;
      mine.rank = r;
      ::_exit(body(mine));
    }
    pids[size_t(r)] = pid;
    std::this_thread::sleep_for(stagger);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int st = 0;
    DSA_CHECK(pid > 0 && ::waitpid(pid, &st, 0) == pid);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
  }
  return codes;
}

std::vector<int> all_ok(int32_t world) { return std::vector<int>(size_t(world), kOk); }

// Rank r's input to call i: rank-dependent, so a reduction that dropped a rank or returned this
// rank's own values would not give the expected result.
int64_t input(int32_t r, int i, size_t k) { return (r + 1) * int64_t(k + 1) - 3 * r + 7 * i; }

// Checks that `got` is the error every later call of every kind on this rank gives too, at once.
int stays_broken(SocketGroup& g, const Status& first, int32_t rank) {
  const Clock::time_point t = Clock::now();
  int64_t v[2] = {1, 2};
  uint8_t bytes[4] = {}, gathered[64] = {};
  bf16 halves[64] = {};
  const Status later[] = {g.all_reduce(v, ReduceOp::kSum), g.all_gather(bytes, gathered, 4),
                          g.reduce_scatter_sum_bf16(halves, halves + 32, 2)};
  for (const Status& again : later) {
    if (again.ok()) return failed(kNotBrokenForGood, rank, "a call after the error succeeded");
    if (again.message() != first.message() || again.code() != first.code()) {
      return failed(kNotBrokenForGood, rank, "later: " + again.to_string());
    }
  }
  if (ms_since(t) > 50) return failed(kWrongTiming, rank, "a later call did not fail at once");
  return kOk;
}

TEST(SocketGroup, ThreeProcessesSumAndMaxOverManyCalls) {
  dsa::testing::within_seconds(30, [] {
    constexpr int32_t kWorld = 3;
    constexpr int kCalls = 16;
    // Ranks 2 and 1 start before rank 0 listens: they must retry, not give up.
    auto codes = run_world(kWorld, 5000ms, {2, 1, 0}, 60ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      if ((*g)->rank() != c.rank || (*g)->world_size() != kWorld) {
        return failed(kWrongResult, c.rank, "rank() or world_size()");
      }
      for (int i = 0; i <= kCalls; ++i) {
        // Sizes 0 (an empty span), 1, 2, 3 with both ops, then one large call that arrives in
        // several pieces.
        const size_t n = i == kCalls ? 50000 : size_t(i % 4);
        const ReduceOp op = (i / 4) % 2 ? ReduceOp::kMax : ReduceOp::kSum;
        std::vector<int64_t> v(n), want(n);
        for (size_t k = 0; k < n; ++k) {
          v[k] = input(c.rank, i, k);
          want[k] = input(0, i, k);
          for (int32_t r = 1; r < kWorld; ++r) {
            want[k] =
                op == ReduceOp::kSum ? want[k] + input(r, i, k) : std::max(want[k], input(r, i, k));
          }
        }
        if (Status s = (*g)->all_reduce(v, op); !s.ok()) {
          return failed(kCallFailed, c.rank, s.to_string());
        }
        if (v != want) return failed(kWrongResult, c.rank, "call " + std::to_string(i));
      }
      return int(kOk);
    });
    EXPECT_EQ(codes, all_ok(kWorld));
  });
}

size_t open_fds() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += !e.is_directory();
  return n;
}

TEST(SocketGroup, WorldSizeOneIsTheIdentityWithoutASocket) {
  const size_t fds = open_fds();
  SocketGroupConfig c;
  c.addr = {"no-such-host.invalid", 0};  // never looked at: there is no one to talk to
  c.world_size = 1;
  auto g = SocketGroup::create(c);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ((*g)->rank(), 0);
  EXPECT_EQ((*g)->world_size(), 1);
  std::vector<int64_t> v = {3, -4, 1LL << 40};
  ASSERT_TRUE((*g)->all_reduce(v, ReduceOp::kSum).ok());
  ASSERT_TRUE((*g)->all_reduce(v, ReduceOp::kMax).ok());
  ASSERT_TRUE((*g)->all_reduce({}, ReduceOp::kSum).ok());
  EXPECT_EQ(v, (std::vector<int64_t>{3, -4, 1LL << 40}));
  EXPECT_EQ(open_fds(), fds);
}

TEST(SocketGroup, ACallOfAnotherSizeBreaksTheGroupOnEveryRank) {
  dsa::testing::within_seconds(30, [] {
    auto codes = run_world(3, 3000ms, {0, 1, 2}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      int64_t first[2] = {c.rank, 1};
      if (Status s = (*g)->all_reduce(first, ReduceOp::kSum); !s.ok()) {
        return failed(kCallFailed, c.rank, s.to_string());
      }
      if (first[0] != 3 || first[1] != 3) return failed(kWrongResult, c.rank, "first call");
      // Rank 2 makes the second call with 3 values, the others with 2.
      std::vector<int64_t> v(c.rank == 2 ? 3 : 2, 1);
      const Status s = (*g)->all_reduce(v, ReduceOp::kSum);
      if (s.ok()) return failed(kCallSucceeded, c.rank, "the mismatched call succeeded");
      // Rank 0 found it; the others fail with its reason.
      if (!contains(s, "all_reduce #2") ||
          !contains(s, "rank 2 called it with 3 values, rank 0 with 2") ||
          s.code() != StatusCode::kFailedPrecondition) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(3));
  });
}

TEST(SocketGroup, ARankThatNeverCallsIsNamedWithinTheTimeout) {
  dsa::testing::within_seconds(30, [] {
    auto codes = run_world(3, 500ms, {0, 1, 2}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      if (c.rank == 2) {  // alive, connected, and never calling
        std::this_thread::sleep_for(1000ms);
        return int(kOk);
      }
      const Clock::time_point t = Clock::now();
      int64_t v[2] = {1, 2};
      const Status s = (*g)->all_reduce(v, ReduceOp::kMax);
      const int64_t ms = ms_since(t);
      if (s.ok()) return failed(kCallSucceeded, c.rank, "a call without rank 2 succeeded");
      // Rank 0 waits its timeout; rank 1 hears rank 0's verdict (sooner, if it started later).
      if ((c.rank == 0 && ms < 450) || ms > 1400) {
        return failed(kWrongTiming, c.rank, "failed after " + std::to_string(ms) + " ms");
      }
      if (!contains(s, "all_reduce #1") || !contains(s, "ranks [0, 1] arrived") ||
          !contains(s, "ranks [2] did not answer")) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(3));
  });
}

TEST(SocketGroup, APeerDoesNotHangWhenRankZeroNeverCalls) {
  dsa::testing::within_seconds(30, [] {
    auto codes = run_world(2, 300ms, {0, 1}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      if (c.rank == 0) {
        std::this_thread::sleep_for(1000ms);
        return int(kOk);
      }
      const Clock::time_point t = Clock::now();
      int64_t v[1] = {1};
      const Status s = (*g)->all_reduce(v, ReduceOp::kSum);
      const int64_t ms = ms_since(t);
      if (s.ok()) return failed(kCallSucceeded, c.rank, "a call without rank 0 succeeded");
      // The timeout, plus the grace a peer gives rank 0's verdict (here the timeout again).
      if (ms < 550 || ms > 1400) {
        return failed(kWrongTiming, c.rank, "failed after " + std::to_string(ms) + " ms");
      }
      if (!contains(s, "rank 1: all_reduce #1 (sum, 1 values): waiting for rank 0's result")) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(2));
  });
}

TEST(SocketGroup, ARankThatExitsIsNamedAtOnce) {
  dsa::testing::within_seconds(30, [] {
    auto codes = run_world(3, 5000ms, {0, 1, 2}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      if (c.rank == 2) return int(kOk);  // the process ends: its socket closes
      const Clock::time_point t = Clock::now();
      int64_t v[1] = {1};
      const Status s = (*g)->all_reduce(v, ReduceOp::kSum);
      if (s.ok()) return failed(kCallSucceeded, c.rank, "a call without rank 2 succeeded");
      if (ms_since(t) > 1000) return failed(kWrongTiming, c.rank, "waited for the timeout");
      if (!contains(s, "all_reduce #1") || !contains(s, "rank 2 closed its connection")) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(3));
  });
}

// Rank r's byte i in call c of the all_gather tests.
uint8_t byte_of(int32_t r, size_t i, int c) { return uint8_t(r * 31 + i * 7 + (i >> 9) + c * 13); }

TEST(SocketGroup, AllGatherLandsEveryRanksBytesInRankOrder) {
  dsa::testing::within_seconds(30, [] {
    constexpr int32_t kWorld = 3;
    // 0 bytes, and 4 MiB that arrive in many pieces (and go out without a copy).
    const std::vector<size_t> sizes = {1, 0, 37, (size_t(4) << 20) + 3, 5};
    auto codes = run_world(kWorld, 5000ms, {0, 1, 2}, 0ms, [&](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      DeviceCollective& d = **g;
      if (d.rank() != c.rank || d.world_size() != kWorld) {
        return failed(kWrongResult, c.rank, "rank() or world_size()");
      }
      for (size_t call = 0; call < sizes.size(); ++call) {
        const size_t n = sizes[call];
        std::vector<uint8_t> send(n), recv(n * kWorld + 1, 0xAB);
        for (size_t i = 0; i < n; ++i) send[i] = byte_of(c.rank, i, int(call));
        if (Status s = d.all_gather(send.data(), recv.data(), n); !s.ok()) {
          return failed(kCallFailed, c.rank, s.to_string());
        }
        for (int32_t q = 0; q < kWorld; ++q) {
          for (size_t i = 0; i < n; ++i) {
            if (recv[size_t(q) * n + i] != byte_of(q, i, int(call))) {
              return failed(kWrongResult, c.rank,
                            "call " + std::to_string(call) + ": rank " + std::to_string(q) +
                                "'s byte " + std::to_string(i));
            }
          }
        }
        if (recv.back() != 0xAB) return failed(kWrongResult, c.rank, "wrote past the end");
        // An all_reduce between the gathers: the kinds share one sequence.
        int64_t v[1] = {c.rank};
        if (Status s = (*g)->all_reduce(v, ReduceOp::kSum); !s.ok()) {
          return failed(kCallFailed, c.rank, s.to_string());
        }
        if (v[0] != 3) return failed(kWrongResult, c.rank, "the all_reduce between");
      }
      return int(kOk);
    });
    EXPECT_EQ(codes, all_ok(kWorld));
  });
}

// Every rank's send of one reduce_scatter test call, and what LocalDeviceGroup gives each rank.
struct ScatterCase {
  size_t count = 0;
  std::vector<std::vector<bf16>> send;        // [world][world * count]
  std::vector<std::vector<bf16>> want;        // [world][count]: LocalDeviceGroup's result
  std::vector<std::vector<int32_t>> owner;    // [world][count]: the one non -0 rank, or -1
  std::vector<std::vector<uint16_t>> single;  // [world][count]: that rank's value's bits
};

// Seeded inputs of four sorts, by element: random values of mixed magnitude on every rank (the
// sum's rounding depends on the order), one rank's value beside -0.0 on every other (the MoE's
// slots: that value bit for bit, -0.0 and +0.0 and subnormals included), +0.0 and -0.0 mixed, and
// large values that cancel.
ScatterCase scatter_case(int32_t world, size_t count, uint32_t seed) {
  ScatterCase k;
  k.count = count;
  const size_t n = size_t(world) * count;
  k.send.assign(size_t(world), std::vector<bf16>(n));
  k.owner.assign(size_t(world), std::vector<int32_t>(count, -1));
  k.single.assign(size_t(world), std::vector<uint16_t>(count, 0));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  const float specials[] = {-0.0f, 0.0f, 9.2e-41f, -1.0e-39f, 3.0e38f, -2.5f, 1.0f};
  for (size_t j = 0; j < n; ++j) {
    const size_t block = j / (count ? count : 1), i = j % (count ? count : 1);
    switch (rng() % 4) {
      case 0:
        for (int32_t q = 0; q < world; ++q) {
          k.send[size_t(q)][j] = float_to_bf16(std::ldexp(normal(rng), exponent(rng)));
        }
        break;
      case 1: {
        const int32_t who = int32_t(rng() % uint32_t(world));
        const bf16 v = rng() % 2 ? float_to_bf16(specials[rng() % std::size(specials)])
                                 : float_to_bf16(std::ldexp(normal(rng), exponent(rng)));
        for (int32_t q = 0; q < world; ++q) {
          k.send[size_t(q)][j] = q == who ? v : float_to_bf16(-0.0f);
        }
        k.owner[block][i] = who;
        k.single[block][i] = v.bits;
        break;
      }
      case 2:
        for (int32_t q = 0; q < world; ++q) {
          k.send[size_t(q)][j] = float_to_bf16(rng() % 2 ? 0.0f : -0.0f);
        }
        break;
      default:
        for (int32_t q = 0; q < world; ++q) {
          const float big = std::ldexp(1.0f + float(rng() % 128) / 128.0f, 100);
          k.send[size_t(q)][j] = float_to_bf16(q % 2 ? -big : big + normal(rng));
        }
        break;
    }
  }
  // The in-process group's answer for the same inputs, one thread per rank.
  k.want.assign(size_t(world), std::vector<bf16>(count));
  auto local = LocalDeviceGroup::create(world, 5000ms);
  DSA_CHECK(local.ok());
  std::vector<Status> st(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      st[size_t(r)] = (*local)->rank(r).reduce_scatter_sum_bf16(k.send[size_t(r)].data(),
                                                                k.want[size_t(r)].data(), count);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : st) DSA_CHECK(s.ok());
  return k;
}

TEST(SocketGroup, ReduceScatterGivesTheInProcessGroupsBitsOnEveryRank) {
  dsa::testing::within_seconds(30, [] {
    constexpr int32_t kWorld = 3;
    // Computed before the fork: every rank's process has every rank's inputs and the answers.
    std::vector<ScatterCase> cases;
    for (size_t count : {size_t(7), size_t(0), size_t(1000), size_t(700000)}) {
      cases.push_back(scatter_case(kWorld, count, 1234 + uint32_t(cases.size())));
    }
    size_t singles = 0, nonzero = 0;
    for (const ScatterCase& k : cases) {
      for (const auto& ranks : k.owner) {
        singles +=
            size_t(std::count_if(ranks.begin(), ranks.end(), [](int32_t o) { return o >= 0; }));
      }
      for (const auto& want : k.want) {
        nonzero += size_t(
            std::count_if(want.begin(), want.end(), [](bf16 v) { return (v.bits & 0x7FFF) != 0; }));
      }
    }
    ASSERT_GT(singles, 100000u);  // the inputs are what they say
    ASSERT_GT(nonzero, 100000u);
    auto codes = run_world(kWorld, 5000ms, {0, 1, 2}, 0ms, [&](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      DeviceCollective& d = **g;
      const size_t me = size_t(c.rank);
      for (size_t call = 0; call < cases.size(); ++call) {
        const ScatterCase& k = cases[call];
        std::vector<bf16> recv(k.count + 1, float_to_bf16(42.0f));
        if (Status s = d.reduce_scatter_sum_bf16(k.send[me].data(), recv.data(), k.count);
            !s.ok()) {
          return failed(kCallFailed, c.rank, s.to_string());
        }
        for (size_t i = 0; i < k.count; ++i) {
          if (recv[i].bits != k.want[me][i].bits) {
            return failed(kWrongResult, c.rank,
                          "call " + std::to_string(call) + " element " + std::to_string(i) +
                              ": bits " + std::to_string(recv[i].bits) + ", the in-process " +
                              "group's " + std::to_string(k.want[me][i].bits));
          }
          if (k.owner[me][i] >= 0 && recv[i].bits != k.single[me][i]) {
            return failed(kWrongResult, c.rank,
                          "call " + std::to_string(call) + " element " + std::to_string(i) +
                              ": not rank " + std::to_string(k.owner[me][i]) + "'s lone value");
          }
        }
        if (recv.back().bits != float_to_bf16(42.0f).bits) {
          return failed(kWrongResult, c.rank, "wrote past the end");
        }
        // An all_gather between: the kinds share one sequence.
        const uint8_t mine = uint8_t(c.rank + 1);
        uint8_t all[kWorld] = {};
        if (Status s = d.all_gather(&mine, all, 1); !s.ok()) {
          return failed(kCallFailed, c.rank, s.to_string());
        }
        if (all[0] != 1 || all[1] != 2 || all[2] != 3) {
          return failed(kWrongResult, c.rank, "the all_gather between");
        }
      }
      return int(kOk);
    });
    EXPECT_EQ(codes, all_ok(kWorld));
  });
}

TEST(SocketGroup, ACallOfAnotherKindBreaksTheGroupOnEveryRank) {
  dsa::testing::within_seconds(30, [] {
    auto codes = run_world(3, 3000ms, {0, 1, 2}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      int64_t first[1] = {1};
      if (Status s = (*g)->all_reduce(first, ReduceOp::kSum); !s.ok() || first[0] != 3) {
        return failed(kCallFailed, c.rank, "first call: " + s.to_string());
      }
      // Rank 2 gathers where the others all-reduce.
      Status s;
      if (c.rank == 2) {
        uint8_t send[4] = {}, recv[12];
        s = (*g)->all_gather(send, recv, 4);
      } else {
        int64_t v[2] = {1, 1};
        s = (*g)->all_reduce(v, ReduceOp::kSum);
      }
      if (s.ok()) return failed(kCallSucceeded, c.rank, "the mismatched call succeeded");
      if (!contains(s,
                    "all_reduce #2 (sum, 2 values): rank 2 made a call of kind all_gather, "
                    "rank 0 of kind all_reduce") ||
          s.code() != StatusCode::kFailedPrecondition) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(3));
  });
}

TEST(SocketGroup, AnAllGatherOrReduceScatterOfAnotherSizeIsNamed) {
  dsa::testing::within_seconds(30, [] {
    // 4 MiB: rank 1 may still be sending when rank 0 finds rank 2's header and breaks the group.
    constexpr size_t kBytes = size_t(4) << 20;
    auto codes = run_world(3, 3000ms, {0, 1, 2}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      const size_t n = c.rank == 2 ? kBytes + 1 : kBytes;
      std::vector<uint8_t> send(n, 7), recv(3 * n);
      const Status s = (*g)->all_gather(send.data(), recv.data(), n);
      if (s.ok()) return failed(kCallSucceeded, c.rank, "the mismatched call succeeded");
      if (!contains(s,
                    "all_gather #1 (4194304 bytes per rank): rank 2 called it with 4194305 "
                    "bytes per rank, rank 0 with 4194304") ||
          s.code() != StatusCode::kFailedPrecondition) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(3));
    codes = run_world(3, 3000ms, {0, 1, 2}, 0ms, [](const SocketGroupConfig& c) {
      auto g = SocketGroup::create(c);
      if (!g.ok()) return failed(kCreateFailed, c.rank, g.status().to_string());
      const size_t n = c.rank == 1 ? 5 : 4;
      std::vector<bf16> send(3 * n), recv(n);
      const Status s = (*g)->reduce_scatter_sum_bf16(send.data(), recv.data(), n);
      if (s.ok()) return failed(kCallSucceeded, c.rank, "the mismatched call succeeded");
      if (!contains(s,
                    "reduce_scatter_sum_bf16 #1 (4 values per rank): rank 1 called it with 5 "
                    "values per rank, rank 0 with 4") ||
          s.code() != StatusCode::kFailedPrecondition) {
        return failed(kWrongMessage, c.rank, s.to_string());
      }
      return stays_broken(**g, s, c.rank);
    });
    EXPECT_EQ(codes, all_ok(3));
  });
}

TEST(SocketGroup, WorldSizeOneDeviceCollectivesAreTheInProcessGroupsCopy) {
  const size_t fds = open_fds();
  SocketGroupConfig c;
  c.world_size = 1;
  auto g = SocketGroup::create(c);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  DeviceCollective& d = **g;
  const uint8_t send[5] = {1, 2, 3, 4, 5};
  uint8_t recv[6] = {0, 0, 0, 0, 0, 0xAB};
  ASSERT_TRUE(d.all_gather(send, recv, 5).ok());
  EXPECT_EQ(std::memcmp(send, recv, 5), 0);
  EXPECT_EQ(recv[5], 0xAB);
  ASSERT_TRUE(d.all_gather(nullptr, nullptr, 0).ok());
  // Every non-NaN value comes back bit for bit, as from the in-process group of one rank.
  const float values[] = {-0.0f, 0.0f, 3.5f, -1.0e-39f, 3.0e38f, -INFINITY, 1.0e-3f};
  std::vector<bf16> in, out(std::size(values)), local_out(std::size(values));
  for (float v : values) in.push_back(float_to_bf16(v));
  ASSERT_TRUE(d.reduce_scatter_sum_bf16(in.data(), out.data(), in.size()).ok());
  ASSERT_TRUE(d.reduce_scatter_sum_bf16(nullptr, nullptr, 0).ok());
  auto local = LocalDeviceGroup::create(1, 1000ms);
  ASSERT_TRUE(local.ok());
  ASSERT_TRUE(
      (*local)->rank(0).reduce_scatter_sum_bf16(in.data(), local_out.data(), in.size()).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].bits, in[i].bits) << i;
    EXPECT_EQ(out[i].bits, local_out[i].bits) << i;
  }
  EXPECT_EQ(open_fds(), fds);
}

// Ranks 0 and 1 first (rank 1 checks in), then the rank that rank 0 refuses.
std::vector<int> run_refusal(const std::function<void(SocketGroupConfig&)>& spoil,
                             const std::string& why) {
  return run_world(3, 3000ms, {0, 1, 2}, 150ms, [&](const SocketGroupConfig& c) {
    SocketGroupConfig mine = c;
    if (c.rank == 2) spoil(mine);
    auto g = SocketGroup::create(mine);
    if (g.ok()) return failed(kCreateSucceeded, c.rank, "create succeeded");
    // Rank 1 learns the refusal only if it checked in before rank 2 was refused; on a loaded
    // machine it may come later and find rank 0 gone. Either way its create must fail.
    if (c.rank == 1 && !contains(g.status(), "refused")) return int(kOk);
    const StatusCode want =
        c.rank == 0 ? StatusCode::kInvalidArgument : StatusCode::kFailedPrecondition;
    const std::string prefix =
        c.rank == 0 ? "" : "rank 0 refused rank " + std::to_string(mine.rank) + ": ";
    if (!contains(g.status(), prefix + "socket group: " + why) || g.status().code() != want) {
      return failed(kWrongMessage, c.rank, g.status().to_string());
    }
    return int(kOk);
  });
}

TEST(SocketGroup, ARankWithOtherFlagsIsRefusedWithBothHashes) {
  dsa::testing::within_seconds(30, [] {
    auto codes = run_refusal([](SocketGroupConfig& c) { c.flags_hash = 0xBAD; },
                             "rank 2 runs with other flags (hash 0xbad, rank 0 has 0xf1a9)");
    EXPECT_EQ(codes, all_ok(3));
  });
}

TEST(SocketGroup, ARankThatChecksInTwiceOrWithAnotherWorldIsRefused) {
  dsa::testing::within_seconds(30, [] {
    EXPECT_EQ(run_refusal([](SocketGroupConfig& c) { c.rank = 1; }, "rank 1 checked in twice"),
              all_ok(3));
    EXPECT_EQ(run_refusal([](SocketGroupConfig& c) { c.world_size = 4; },
                          "rank 2 was started with world size 4, rank 0 with 3"),
              all_ok(3));
  });
}

TEST(SocketGroup, RefusesBadConfigFields) {
  struct Case {
    std::function<void(SocketGroupConfig&)> spoil;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](SocketGroupConfig& c) { c.world_size = 0; }, "world_size = 0"},
      {[](SocketGroupConfig& c) { c.world_size = 1025; }, "world_size = 1025"},
      {[](SocketGroupConfig& c) { c.rank = -1; }, "rank = -1"},
      {[](SocketGroupConfig& c) { c.rank = 2; }, "rank = 2: must be in [0, world_size = 2)"},
      {[](SocketGroupConfig& c) { c.timeout = 0ms; }, "timeout = 0 ms"},
      {[](SocketGroupConfig& c) { c.addr.port = 0; }, "addr.port = 0"},
      {[](SocketGroupConfig& c) { c.addr.port = 70000; }, "addr.port = 70000"},
      {[](SocketGroupConfig& c) { c.addr.host.clear(); }, "addr.host is empty"},
  };
  for (const Case& k : cases) {
    SocketGroupConfig c;
    c.addr = {"127.0.0.1", free_port()};
    c.world_size = 2;
    c.timeout = 100ms;
    k.spoil(c);
    auto g = SocketGroup::create(c);
    ASSERT_FALSE(g.ok()) << k.field;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().to_string();
    EXPECT_TRUE(contains(g.status(), k.field)) << g.status().to_string();
  }
}

}  // namespace
}  // namespace dsa::dist
