// The NCCL group at world size 1 (one GPU): the reductions are the identity, the values make the
// round trip through the device, the device collectives run inside a captured CUDA graph, and bad
// arguments are refused. Skipped without a device.
#include "dsa/dist/nccl_group.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "dsa/cuda/graph.h"
#include "dsa/cuda/stream.h"
#include "dsa/testing/gpu_skip.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;

TEST(NcclGroup, WorldSizeOneRoundTrips) {
  DSA_SKIP_WITHOUT_GPU();
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto g = NcclGroup::create(0, 1, *id, 10000ms);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ((*g)->world_size(), 1);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<int64_t> v = {3, -7, int64_t(1) << 40, 0, 12};
    const std::vector<int64_t> want = v;
    ASSERT_TRUE((*g)->all_reduce(v, op).ok());
    EXPECT_EQ(v, want);
  }
  std::vector<int64_t> big(NcclGroup::kMaxValues + 1, 1);
  Status s = (*g)->all_reduce(big, ReduceOp::kSum);
  EXPECT_NE(s.message().find("4097 values"), std::string::npos) << s.to_string();
}

// The MoE's device collectives as a forward graph holds them (docs/multi_gpu.md): captured once on
// the forward stream, nothing runs at capture, and each replay moves the bytes the buffers hold
// at that replay (a second replay after new inputs gives the new bytes), with no host
// synchronisation inside the capture (global capture mode would fail it).
TEST(NcclGroup, DeviceCollectivesReplayInsideACudaGraph) {
  DSA_SKIP_WITHOUT_GPU();
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto g = NcclGroup::create(0, 1, *id, 10000ms);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_TRUE(cuda::use_forward_stream().ok());
  DeviceCollective& dc = **g;
  EXPECT_EQ(dc.world_size(), 1);
  constexpr size_t kBytes = 4096 + 36, kCount = 1000;
  uint8_t *send = nullptr, *recv = nullptr;
  bf16 *sb = nullptr, *rb = nullptr;
  ASSERT_EQ(cudaMalloc(&send, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&sb, kCount * sizeof(bf16)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&rb, kCount * sizeof(bf16)), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv, 0, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(rb, 0, kCount * sizeof(bf16)), cudaSuccess);
  auto fill = [&](uint8_t salt) {
    std::vector<uint8_t> bytes(kBytes);
    for (size_t i = 0; i < kBytes; ++i) bytes[i] = uint8_t(i * 7 + salt);
    std::vector<bf16> vals(kCount);
    for (size_t i = 0; i < kCount; ++i) vals[i] = float_to_bf16(float(int(i) - 500) * 0.25f + salt);
    EXPECT_EQ(cudaMemcpy(send, bytes.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(sb, vals.data(), kCount * sizeof(bf16), cudaMemcpyHostToDevice),
              cudaSuccess);
    return std::make_pair(bytes, vals);
  };
  auto check = [&](const std::pair<std::vector<uint8_t>, std::vector<bf16>>& want) {
    std::vector<uint8_t> got(kBytes);
    std::vector<bf16> gotb(kCount);
    ASSERT_EQ(cudaMemcpy(got.data(), recv, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gotb.data(), rb, kCount * sizeof(bf16), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got, want.first);
    EXPECT_EQ(std::memcmp(gotb.data(), want.second.data(), kCount * sizeof(bf16)), 0);
  };
  // Eager first (the warm-up every rank runs before capturing, docs/multi_gpu.md).
  auto eager = fill(1);
  ASSERT_TRUE(dc.all_gather(send, recv, kBytes).ok());
  ASSERT_TRUE(dc.reduce_scatter_sum_bf16(sb, rb, kCount).ok());
  ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
  check(eager);

  ASSERT_EQ(cudaMemset(recv, 0, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(rb, 0, kCount * sizeof(bf16)), cudaSuccess);
  auto first = fill(2);
  auto graph = cuda::Graph::capture([&]() -> Status {
    DSA_RETURN_IF_ERROR(dc.all_gather(send, recv, kBytes));
    return dc.reduce_scatter_sum_bf16(sb, rb, kCount);
  });
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  EXPECT_GE(graph->num_nodes(), 1u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> untouched(kBytes);
  ASSERT_EQ(cudaMemcpy(untouched.data(), recv, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(untouched, std::vector<uint8_t>(kBytes, 0)) << "the capture ran the collective";
  ASSERT_TRUE(graph->launch().ok());
  ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
  check(first);
  auto second = fill(3);
  ASSERT_TRUE(graph->launch().ok());
  ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
  check(second);
  cudaFree(send);
  cudaFree(recv);
  cudaFree(sb);
  cudaFree(rb);
}

// The arguments are checked before any CUDA or NCCL call, so this runs without a device too.
TEST(NcclGroup, RefusesBadArguments) {
  NcclId id{};
  auto g = NcclGroup::create(2, 2, id, 1000ms);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("rank = 2, world_size = 2"), std::string::npos);
  auto t = NcclGroup::create(0, 1, id, 0ms);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("timeout = 0 ms"), std::string::npos);
}

}  // namespace
}  // namespace dsa::dist
