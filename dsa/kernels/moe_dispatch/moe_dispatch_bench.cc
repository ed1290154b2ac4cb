// MoE dispatch benchmark at V3.2 shapes (SPEC.md §8.6, §10): 256 experts, k = 8, a decode batch
// of T rows (T in {32, 128, 256}) and a prefill chunk (4096). grouped_linear runs the gate/up
// shape (7168 -> 2048, x_row = pair_row) and the down shape (2048 -> 7168, y_row = pair_slot);
// moe_group is timed alone. FLOPs = 2 * pairs * in * out; bytes = the weights of the experts in
// use + x + y once each (decode is bandwidth-bound: a few rows per expert). All 256 experts have
// their own 28 MiB weight (7.5 GB), so nothing runs from L2. One line per shape: µs (median of
// 50), TFLOP/s and its fraction of 805, TB/s and its fraction of 4.28.
//   usage: moe_dispatch_bench
#include <cuda_runtime.h>

#include <cstdio>
#include <set>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/testing/random.h"

namespace {

using dsa::bf16;
using dsa::Status;
using dsa::cuda::DeviceBuffer;
namespace k = dsa::kernels;

constexpr int32_t kExperts = 256, kTopK = 8, kHidden = 7168, kInter = 2048;

struct Routed {
  int32_t rows;
  DeviceBuffer<int32_t> ids, offsets, pair_row, pair_slot;
  int32_t experts_used;
};

dsa::StatusOr<Routed> route(int32_t rows, dsa::testing::Rng& rng) {
  const std::vector<int32_t> ids = k::random_expert_ids(rng, rows, kExperts, kTopK, 0);
  Routed r{rows};
  const size_t S = ids.size();
  DSA_ASSIGN_OR_RETURN(r.ids, DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(ids)));
  DSA_ASSIGN_OR_RETURN(r.offsets, DeviceBuffer<int32_t>::alloc(kExperts + 1));
  DSA_ASSIGN_OR_RETURN(r.pair_row, DeviceBuffer<int32_t>::alloc(S));
  DSA_ASSIGN_OR_RETURN(r.pair_slot, DeviceBuffer<int32_t>::alloc(S));
  r.experts_used = static_cast<int32_t>(std::set<int32_t>(ids.begin(), ids.end()).size());
  return r;
}

k::MoeGroupParams group_params(const Routed& r) {
  k::MoeGroupParams p;
  p.expert_ids = r.ids.data();
  p.num_slots = r.rows * kTopK;
  p.num_experts = kExperts;
  p.k = kTopK;
  p.offsets = r.offsets.data();
  p.pair_row = r.pair_row.data();
  p.pair_slot = r.pair_slot.data();
  return p;
}

void print_line(const char* what, int32_t rows, int32_t in, int32_t out, double us, double flops,
                double bytes) {
  const double tflops = flops / (us * 1e-6) / 1e12, tbps = bytes / (us * 1e-6) / 1e12;
  std::printf(
      "%-15s T=%-5d %5d -> %-5d %9.2f us %8.2f TFLOP/s %5.1f%% of 805  %6.3f TB/s %5.1f%% of "
      "4.28\n",
      what, rows, in, out, us, tflops, 100.0 * tflops * 1e12 / dsa::cuda::kH200Bf16Flops, tbps,
      100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth);
}

// `weights` holds 256 matrices of kHidden * kInter elements; the down shape reads them as
// [7168, 2048] (same size), which is all a bandwidth figure needs.
Status bench_rows(int32_t rows, const DeviceBuffer<const bf16*>& weights, dsa::testing::Rng& rng) {
  DSA_ASSIGN_OR_RETURN(Routed r, route(rows, rng));
  const int32_t S = rows * kTopK;
  const k::MoeGroupParams gp = group_params(r);
  DSA_RETURN_IF_ERROR(k::moe_group_cuda(gp));
  DSA_ASSIGN_OR_RETURN(double group_us, dsa::cuda::median_us([&] { return k::moe_group_cuda(gp); },
                                                             dsa::cuda::current_stream()));
  std::printf("%-15s T=%-5d %9.2f us\n", "moe_group", rows, group_us);

  const std::vector<bf16> hx = rng.bf16_vector(size_t(S) * kHidden);
  DSA_ASSIGN_OR_RETURN(auto x, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx)));
  DSA_ASSIGN_OR_RETURN(auto h, DeviceBuffer<bf16>::alloc(size_t(S) * kInter));
  DSA_ASSIGN_OR_RETURN(auto y, DeviceBuffer<bf16>::alloc(size_t(S) * kHidden));
  for (bool down : {false, true}) {
    const int32_t in = down ? kInter : kHidden, out = down ? kHidden : kInter;
    k::GroupedLinearParams p;
    p.x = down ? h.data() : x.data();
    p.x_rows = down ? S : rows;
    p.x_row = down ? nullptr : r.pair_row.data();
    p.weights = weights.data();
    p.offsets = r.offsets.data();
    p.num_groups = kExperts;
    p.capacity = S;
    p.in_features = in;
    p.out_features = out;
    p.y = down ? y.data() : h.data();
    p.y_rows = S;
    p.y_row = down ? r.pair_slot.data() : nullptr;
    DSA_ASSIGN_OR_RETURN(double us, dsa::cuda::median_us([&] { return k::grouped_linear_cuda(p); },
                                                         dsa::cuda::current_stream()));
    const double flops = 2.0 * S * in * out;
    const double bytes = double(r.experts_used) * in * out * 2 + double(S) * (in + out) * 2;
    print_line(down ? "grouped down" : "grouped gate", rows, in, out, us, flops, bytes);
  }
  return dsa::ok_status();
}

}  // namespace

int main() {
  // Unchecked, as a release run: checked mode adds validation passes and a device read.
  dsa::ScopedCheckedMode unchecked(false);
  dsa::testing::Rng rng(dsa::testing::test_seed());
  const size_t per_expert = size_t(kHidden) * kInter;
  auto all = DeviceBuffer<bf16>::alloc(per_expert * kExperts);
  if (!all.ok()) {
    std::fprintf(stderr, "moe_dispatch_bench: %s\n", all.status().to_string().c_str());
    return 1;
  }
  // 0x3C3C ~ 0.0115: finite values; the timing does not depend on them.
  Status st = all->fill_bytes(0x3C);
  std::vector<const bf16*> ptrs(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) ptrs[e] = all->data() + per_expert * e;
  auto weights = DeviceBuffer<const bf16*>::from_host(std::span<const bf16* const>(ptrs));
  if (st.ok() && !weights.ok()) st = weights.status();
  for (int32_t rows : {32, 128, 256, 4096}) {
    if (!st.ok()) break;
    st = bench_rows(rows, *weights, rng);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "moe_dispatch_bench: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
