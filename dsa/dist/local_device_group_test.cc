// The in-process device collectives: all_gather lands every rank's bytes in rank order on every
// rank; reduce_scatter_sum_bf16 gives rank r the sum of block r over the ranks (exact where one
// rank is non-zero, the MoE's case); world size 1 is a copy; and a rank calling with another size
// or another collective fails the call on every rank, naming both, instead of a wrong result.
#include "dsa/dist/local_device_group.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;

std::vector<Status> run_ranks(LocalDeviceGroup& g,
                              const std::function<Status(DeviceCollective&)>& fn) {
  std::vector<Status> out(size_t(g.world_size()));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < g.world_size(); ++r) {
    threads.emplace_back([&, r] { out[size_t(r)] = fn(g.rank(r)); });
  }
  for (auto& t : threads) t.join();
  return out;
}

uint8_t byte_of(int32_t rank, size_t i, int32_t call) { return uint8_t(rank * 31 + i * 7 + call); }

TEST(LocalDeviceGroup, AllGatherIsInRankOrderForEveryWorldSizeAndSize) {
  for (int32_t world : {1, 2, 3, 8}) {
    auto g = LocalDeviceGroup::create(world, 5s);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    // Many calls of different sizes (0 included): each one's bytes are that call's.
    const std::vector<size_t> sizes = {1, 0, 37, 4096, 3};
    auto st = run_ranks(**g, [&](DeviceCollective& c) -> Status {
      EXPECT_EQ(c.world_size(), world);
      for (size_t call = 0; call < sizes.size(); ++call) {
        const size_t n = sizes[call];
        std::vector<uint8_t> send(n), recv(n * size_t(world) + 1, 0xAB);
        for (size_t i = 0; i < n; ++i) send[i] = byte_of(c.rank(), i, int32_t(call));
        DSA_RETURN_IF_ERROR(c.all_gather(send.data(), recv.data(), n));
        for (int32_t q = 0; q < world; ++q) {
          for (size_t i = 0; i < n; ++i) {
            if (recv[size_t(q) * n + i] != byte_of(q, i, int32_t(call))) {
              return internal_error("wrong byte");
            }
          }
        }
        if (recv.back() != 0xAB) return internal_error("wrote past the end");
      }
      return ok_status();
    });
    for (int32_t r = 0; r < world; ++r) {
      EXPECT_TRUE(st[size_t(r)].ok())
          << "world " << world << " rank " << r << ": " << st[size_t(r)].to_string();
    }
  }
}

// Block r of every rank's send reaches rank r summed; a value beside -0.0 on every other rank (the
// MoE's foreign slots) comes back bit for bit, -0.0 itself included; others are the fp32 sum.
TEST(LocalDeviceGroup, ReduceScatterSumsEachBlockOnItsRank) {
  constexpr int32_t kWorld = 3;
  constexpr size_t kCount = 5;
  auto g = LocalDeviceGroup::create(kWorld, 5s);
  ASSERT_TRUE(g.ok());
  const float exclusive[] = {1.5f, -3.0e-38f, -0.0f, 0.0078125f, -2.75f};
  std::vector<std::vector<bf16>> got(kWorld);
  auto st = run_ranks(**g, [&](DeviceCollective& c) -> Status {
    std::vector<bf16> send(kWorld * kCount), recv(kCount);
    for (int32_t b = 0; b < kWorld; ++b) {
      for (size_t i = 0; i < kCount; ++i) {
        // Element i of block b is non-zero only on rank (b + i) % kWorld.
        const bool mine = (b + int32_t(i)) % kWorld == c.rank();
        send[size_t(b) * kCount + i] = float_to_bf16(mine ? exclusive[i] * float(b + 1) : -0.0f);
      }
    }
    DSA_RETURN_IF_ERROR(c.reduce_scatter_sum_bf16(send.data(), recv.data(), kCount));
    got[size_t(c.rank())] = recv;
    // A second call whose every rank contributes: 1 + 2 + 3 per element.
    for (auto& v : send) v = float_to_bf16(float(c.rank() + 1));
    DSA_RETURN_IF_ERROR(c.reduce_scatter_sum_bf16(send.data(), recv.data(), kCount));
    for (const bf16& v : recv) {
      if (bf16_to_float(v) != 6.0f) return internal_error("sum of every rank");
    }
    return ok_status();
  });
  for (int32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(st[size_t(r)].ok()) << st[size_t(r)].to_string();
    for (size_t i = 0; i < kCount; ++i) {
      const bf16 want = float_to_bf16(exclusive[i] * float(r + 1));
      EXPECT_EQ(got[size_t(r)][i].bits, want.bits) << "rank " << r << " element " << i;
    }
  }
}

TEST(LocalDeviceGroup, DifferentSizesOrCallsFailOnEveryRank) {
  {
    auto g = LocalDeviceGroup::create(2, 5s);
    ASSERT_TRUE(g.ok());
    auto st = run_ranks(**g, [&](DeviceCollective& c) {
      std::vector<uint8_t> send(16), recv(64);
      const size_t n = c.rank() == 0 ? 16 : 8;
      return c.all_gather(send.data(), recv.data(), n);
    });
    for (int32_t r = 0; r < 2; ++r) {
      ASSERT_FALSE(st[size_t(r)].ok()) << "rank " << r;
      EXPECT_NE(st[size_t(r)].message().find("sizes [8, 16]"), std::string::npos)
          << st[size_t(r)].to_string();
    }
    // Broken for good: a later, matching call fails too.
    auto again = run_ranks(**g, [&](DeviceCollective& c) {
      uint8_t send[4] = {}, recv[8];
      return c.all_gather(send, recv, 4);
    });
    for (const Status& s : again) EXPECT_FALSE(s.ok());
  }
  {
    auto g = LocalDeviceGroup::create(2, 5s);
    ASSERT_TRUE(g.ok());
    auto st = run_ranks(**g, [&](DeviceCollective& c) -> Status {
      std::vector<bf16> send(8), recv(8);
      if (c.rank() == 0) return c.all_gather(send.data(), recv.data(), 4 * sizeof(bf16));
      return c.reduce_scatter_sum_bf16(send.data(), recv.data(), 4);
    });
    for (const Status& s : st) {
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("kinds [all_gather, reduce_scatter_sum_bf16]"), std::string::npos)
          << s.to_string();
    }
  }
  {  // A rank that never calls: the watchdog names it.
    auto g = LocalDeviceGroup::create(2, 200ms);
    ASSERT_TRUE(g.ok());
    auto st = run_ranks(**g, [&](DeviceCollective& c) -> Status {
      if (c.rank() == 1) return ok_status();
      uint8_t send[4] = {}, recv[8];
      return c.all_gather(send, recv, 4);
    });
    ASSERT_FALSE(st[0].ok());
    EXPECT_NE(st[0].message().find("ranks [1] missing"), std::string::npos) << st[0].to_string();
  }
}

TEST(SoloDeviceCollective, IsACopy) {
  SoloDeviceCollective solo([](void* dst, const void* src, size_t n) {
    std::memcpy(dst, src, n);
    return ok_status();
  });
  EXPECT_EQ(solo.world_size(), 1);
  const uint8_t send[5] = {1, 2, 3, 4, 5};
  uint8_t recv[5] = {};
  ASSERT_TRUE(solo.all_gather(send, recv, 5).ok());
  EXPECT_EQ(std::memcmp(send, recv, 5), 0);
  const bf16 s2[2] = {float_to_bf16(-0.0f), float_to_bf16(3.5f)};
  bf16 r2[2] = {};
  ASSERT_TRUE(solo.reduce_scatter_sum_bf16(s2, r2, 2).ok());
  EXPECT_EQ(r2[0].bits, s2[0].bits);
  EXPECT_EQ(r2[1].bits, s2[1].bits);
}

TEST(LocalDeviceGroup, RejectsBadArguments) {
  auto g = LocalDeviceGroup::create(0, 1s);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("world_size = 0"), std::string::npos);
}

}  // namespace
}  // namespace dsa::dist
