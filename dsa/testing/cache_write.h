// GPU tests of the cache writes (indexer_write, latent_write; SPEC.md §3a, §4.7): the op runs on
// a copy of a pool image, on the host (the reference) or on the device, and the test compares the
// whole image after it, poisoned bytes of slots that must not be written included. The slot lists
// every write test needs (page edges, padded rows, out-of-contract slots) live here too.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/testing/device_copy.h"

namespace dsa::testing {

// A write's Status and the pool image after it.
struct PoolWrite {
  Status status;
  std::vector<uint8_t> bytes;
};

// `op` writing the rows `src` (the params' member `kSource`) to `slot` on the host image itself
// (a reference writes in place); `p` carries the pool's layout (format, num_pages).
template <auto kSource, typename Params, typename Src>
PoolWrite write_on_host(Status (*op)(const Params&), Params p, const std::vector<Src>& src,
                        const std::vector<int32_t>& slot, std::vector<uint8_t> bytes) {
  p.*kSource = src.data();
  p.slot = slot.data();
  p.num_tokens = int32_t(slot.size());
  p.pool.data = bytes.data();
  Status st = op(p);
  return {st, std::move(bytes)};
}

// The same on device copies of the rows, the slots and the image; the image comes back.
template <auto kSource, typename Params, typename Src>
PoolWrite write_on_device(Status (*op)(const Params&), Params p, const std::vector<Src>& src,
                          const std::vector<int32_t>& slot, const std::vector<uint8_t>& bytes) {
  cuda::DeviceBuffer<Src> d_src = dev(src, 1);
  cuda::DeviceBuffer<int32_t> d_slot = dev(slot, 1);
  cuda::DeviceBuffer<uint8_t> d_pool = dev(bytes, 1);
  p.*kSource = d_src.data();
  p.slot = d_slot.data();
  p.num_tokens = int32_t(slot.size());
  p.pool.data = d_pool.data();
  Status st = op(p);
  return {st, host(d_pool)};
}

// Both writes succeeded and left the same image; first_diff(got, want) names the first differing
// byte ("" when none), `what` the case.
template <typename FirstDiff>
void expect_same_write(const PoolWrite& gpu, const PoolWrite& ref, FirstDiff&& first_diff,
                       const std::string& what) {
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
  EXPECT_EQ(first_diff(gpu.bytes, ref.bytes), "") << what;
}

// The `dsa check` adapter of a CUDA cache write: the source rows (`values_per_token` each, the
// params' member `kSource`), the slots and the pool image go to the device, `op` runs there, and
// the image comes back into p.pool.data.
template <auto kSource, typename Params, typename Op>
Status write_on_host_buffers(const Params& p, size_t values_per_token, size_t pool_bytes, Op&& op) {
  const size_t tokens = size_t(std::max(p.num_tokens, 0));
  DSA_ASSIGN_OR_RETURN(auto src, to_device(p.*kSource, tokens * values_per_token, 1));
  DSA_ASSIGN_OR_RETURN(auto slot, to_device(p.slot, tokens, 1));
  DSA_ASSIGN_OR_RETURN(auto pool, to_device(p.pool.data, pool_bytes, 1));
  Params q = p;
  q.*kSource = src.data();
  q.slot = slot.data();
  q.pool.data = pool.data();
  DSA_RETURN_IF_ERROR(op(q));
  return copy_to_host(pool, p.pool.data, pool_bytes);
}

// The first and last legal slots (P and num_pages P - 1), then every inner offset of page 2.
inline std::vector<int32_t> edge_slots(int32_t num_pages) {
  std::vector<int32_t> slot = {kernels::kPageSize, num_pages * kernels::kPageSize - 1};
  for (int32_t o = 1; o < kernels::kPageSize - 1; ++o) slot.push_back(2 * kernels::kPageSize + o);
  return slot;
}

// Valid slots for checked-mode tests: token t writes slot P + t, every 5th token is padded (-1).
inline std::vector<int32_t> padded_consecutive_slots(int32_t tokens) {
  std::vector<int32_t> slot(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) slot[size_t(t)] = t % 5 == 0 ? -1 : kernels::kPageSize + t;
  return slot;
}

// Unchecked-mode slots: every 4th token (from 1) an out-of-contract slot (page 0, past the pool,
// negative other than -1), every 4th (from 2) padded, the others from `perm` (distinct, in pool).
inline std::vector<int32_t> slots_with_out_of_pool(const std::vector<int32_t>& perm, int32_t tokens,
                                                   int32_t num_pages) {
  constexpr int32_t P = kernels::kPageSize;
  const int32_t bad[] = {0,         7,  P - 1, num_pages * P, num_pages * P + 64,
                         INT32_MAX, -2, -64,   INT32_MIN};
  std::vector<int32_t> slot(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) {
    slot[size_t(t)] = t % 4 == 1 ? bad[t % 9] : (t % 4 == 2 ? -1 : perm[size_t(t)]);
  }
  return slot;
}

}  // namespace dsa::testing
