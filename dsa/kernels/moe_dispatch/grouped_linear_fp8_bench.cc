// FP8 grouped linear benchmark at V3.2 expert shapes (SPEC.md §8.6, §8.8, §10): 256 experts,
// k = 8, decode batches of T = 1, 8, 32, 128 rows and a prefill chunk of T = 4096; the gate/up
// shape (7168 -> 2048, x_row = pair_row) and the down shape (2048 -> 7168, x = the T * k expert
// rows). Decode is bound by the expert weights: bytes = the e4m3 codes and block scales of the
// experts in use + x + y once each. Every expert has its own weights (256 x 14.7 MB = 3.8 GB per
// shape), and each timed call takes the next of 8 prepared routings, so consecutive calls touch
// mostly other experts and the weights come from HBM, not L2. One line per shape: µs (median of 50,
// the quantiser launch included), touched weight MB, TB/s and its fraction of 4.28, and TFLOP/s and
// its fraction of the fp8 MMA peak (SPEC.md §10: 1500; the figure that matters at T = 4096, where
// the 32768 pairs make the products compute-bound). Then the decode-equivalent model's MoE at T =
// 1, 4, 8 (bench_equivalent).
//   usage: grouped_linear_fp8_bench [ROWS...]   (default: 1 8 32 128 4096 and the equivalent)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <span>
#include <utility>
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

constexpr int32_t kExperts = 256, kTopK = 8, kHidden = 7168, kInter = 2048, kRoutings = 8;
constexpr size_t kScaleBlocks = size_t(kHidden / 128) * (kInter / 128);  // either orientation

struct Routing {
  DeviceBuffer<int32_t> ids, offsets, pair_row, pair_slot;
  int32_t experts_used = 0;
};

dsa::StatusOr<Routing> route(int32_t rows, dsa::testing::Rng& rng) {
  const std::vector<int32_t> ids = k::random_expert_ids(rng, rows, kExperts, kTopK, 0);
  Routing r;
  const size_t S = ids.size();
  DSA_ASSIGN_OR_RETURN(r.ids, DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(ids)));
  DSA_ASSIGN_OR_RETURN(r.offsets, DeviceBuffer<int32_t>::alloc(kExperts + 1));
  DSA_ASSIGN_OR_RETURN(r.pair_row, DeviceBuffer<int32_t>::alloc(S));
  DSA_ASSIGN_OR_RETURN(r.pair_slot, DeviceBuffer<int32_t>::alloc(S));
  r.experts_used = static_cast<int32_t>(std::set<int32_t>(ids.begin(), ids.end()).size());
  k::MoeGroupParams p;
  p.expert_ids = r.ids.data();
  p.num_slots = static_cast<int32_t>(S);
  p.num_experts = kExperts;
  p.k = kTopK;
  p.offsets = r.offsets.data();
  p.pair_row = r.pair_row.data();
  p.pair_slot = r.pair_slot.data();
  DSA_RETURN_IF_ERROR(k::moe_group_cuda(p));
  return r;
}

struct Weights {
  DeviceBuffer<const uint8_t*> codes;
  DeviceBuffer<const float*> scales;
};

// Every expert's FP8 codes and scales, and the device pointer tables into them.
struct WeightSet {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  Weights w;
};
Status make_weight_set(WeightSet* set) {
  const size_t per_expert = size_t(kHidden) * kInter;
  DSA_ASSIGN_OR_RETURN(set->codes, DeviceBuffer<uint8_t>::alloc(per_expert * kExperts));
  DSA_ASSIGN_OR_RETURN(set->scales, DeviceBuffer<float>::alloc(kScaleBlocks * kExperts));
  // 0x38 = e4m3 1.0; 0x3B3B3B3B ~ 0.0029: finite values, the timing does not depend on them.
  DSA_RETURN_IF_ERROR(set->codes.fill_bytes(0x38));
  DSA_RETURN_IF_ERROR(set->scales.fill_bytes(0x3B));
  std::vector<const uint8_t*> cp(kExperts);
  std::vector<const float*> sp(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) {
    cp[size_t(e)] = set->codes.data() + per_expert * e;
    sp[size_t(e)] = set->scales.data() + kScaleBlocks * e;
  }
  DSA_ASSIGN_OR_RETURN(
      set->w.codes, DeviceBuffer<const uint8_t*>::from_host(std::span<const uint8_t* const>(cp)));
  DSA_ASSIGN_OR_RETURN(set->w.scales,
                       DeviceBuffer<const float*>::from_host(std::span<const float* const>(sp)));
  return dsa::ok_status();
}

Status bench_rows(int32_t rows, const Weights& w, const Weights& w_up, dsa::testing::Rng& rng) {
  std::vector<Routing> routings;
  double used = 0;
  for (int i = 0; i < kRoutings; ++i) {
    DSA_ASSIGN_OR_RETURN(Routing r, route(rows, rng));
    used += r.experts_used;
    routings.push_back(std::move(r));
  }
  used /= kRoutings;
  const int32_t S = rows * kTopK;
  const std::vector<bf16> hx = rng.bf16_vector(size_t(S) * kHidden);
  DSA_ASSIGN_OR_RETURN(auto x, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx)));
  DSA_ASSIGN_OR_RETURN(
      auto h, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx.data(), size_t(S) * kInter)));
  DSA_ASSIGN_OR_RETURN(auto y, DeviceBuffer<bf16>::alloc(size_t(S) * kHidden));
  DSA_ASSIGN_OR_RETURN(auto y_up, DeviceBuffer<bf16>::alloc(size_t(S) * kInter));
  // gate alone, gate + up paired in one launch (the model's form), down.
  for (int variant : {0, 1, 2}) {
    const bool down = variant == 2, paired = variant == 1;
    const int32_t in = down ? kInter : kHidden, out = down ? kHidden : kInter;
    k::GroupedLinearParams p;
    p.x = down ? h.data() : x.data();
    p.x_rows = down ? S : rows;
    p.weights_fp8 = w.codes.data();
    p.weight_scales = w.scales.data();
    p.num_groups = kExperts;
    p.capacity = S;
    p.in_features = in;
    p.out_features = out;
    p.y = y.data();
    p.y_rows = S;
    if (paired) {
      p.weights_fp8_b = w_up.codes.data();
      p.weight_scales_b = w_up.scales.data();
      p.y_b = y_up.data();
    }
    p.scratch_bytes = k::grouped_linear_scratch_bytes(p);
    DSA_ASSIGN_OR_RETURN(auto scratch, DeviceBuffer<uint8_t>::alloc(p.scratch_bytes));
    p.scratch = scratch.data();
    int call = 0;
    auto launch = [&] {
      const Routing& r = routings[size_t(call++ % kRoutings)];
      p.offsets = r.offsets.data();
      p.x_row = down ? nullptr : r.pair_row.data();
      p.y_row = down ? r.pair_slot.data() : nullptr;
      return k::grouped_linear_cuda(p);
    };
    DSA_RETURN_IF_ERROR(launch());  // warm-up: modules, smem opt-in
    DSA_ASSIGN_OR_RETURN(double us, dsa::cuda::median_us(launch, dsa::cuda::current_stream()));
    const double projections = paired ? 2.0 : 1.0;
    const double weight_bytes = projections * used * (double(in) * out + kScaleBlocks * 4.0);
    const double bytes =
        weight_bytes + double(p.x_rows) * in * 2 + projections * double(S) * out * 2;
    const double tbps = bytes / (us * 1e-6) / 1e12;
    const double flops = projections * 2.0 * double(S) * in * out;
    const double tflops = flops / (us * 1e-6) / 1e12;
    std::printf(
        "grouped_fp8 %-4s T=%-4d %5d -> %-5d %9.2f us  experts %6.1f  weights %8.1f MB  %6.3f "
        "TB/s %5.1f%% of 4.28  %7.1f TFLOP/s %5.1f%% of fp8 peak\n",
        down     ? "down"
        : paired ? "g+up"
                 : "gate",
        rows, in, out, us, used, weight_bytes / 1e6, tbps,
        100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth, tflops,
        100.0 * tflops * 1e12 / dsa::cuda::kH200Fp8Flops);
  }
  return dsa::ok_status();
}

// The decode-equivalent V3.2's MoE (scripts/bench_v32.sh: 8 routed experts, top-8, with the
// shared expert as a ninth group): every row's pairs go to all 9 groups, T pairs each. The model
// passes max_group_pairs = T (a row picks an expert once); "mean rule" leaves it 0, the tile
// width from the mean alone (16 at T = 4: the form before stop 43). Call i reads groups
// 9 (i mod 28) .. 9 (i mod 28) + 8 of the 256, so no call finds its weights in L2.
Status bench_equivalent(int32_t rows, const Weights& w, const Weights& w_up, bool bounded,
                        dsa::testing::Rng& rng) {
  constexpr int32_t G = kTopK + 1;
  const int32_t S = rows * G;
  std::vector<int32_t> offsets(G + 1), x_row(static_cast<size_t>(S)), y_row(static_cast<size_t>(S));
  for (int32_t g = 0; g <= G; ++g) offsets[size_t(g)] = g * rows;
  for (int32_t i = 0; i < S; ++i) {
    x_row[size_t(i)] = i % rows;
    y_row[size_t(i)] = (i % rows) * G + i / rows;  // the row's slot of group i / rows
  }
  DSA_ASSIGN_OR_RETURN(auto d_off,
                       DeviceBuffer<int32_t>::from_host(std::span(std::as_const(offsets))));
  DSA_ASSIGN_OR_RETURN(auto d_xr,
                       DeviceBuffer<int32_t>::from_host(std::span(std::as_const(x_row))));
  DSA_ASSIGN_OR_RETURN(auto d_yr,
                       DeviceBuffer<int32_t>::from_host(std::span(std::as_const(y_row))));
  const std::vector<bf16> hx = rng.bf16_vector(size_t(S) * kHidden);
  DSA_ASSIGN_OR_RETURN(auto x, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx)));
  DSA_ASSIGN_OR_RETURN(auto y, DeviceBuffer<bf16>::alloc(size_t(S) * kHidden));
  DSA_ASSIGN_OR_RETURN(auto y_up, DeviceBuffer<bf16>::alloc(size_t(S) * kInter));
  for (const bool down : {false, true}) {
    const int32_t in = down ? kInter : kHidden, out = down ? kHidden : kInter;
    k::GroupedLinearParams p;
    p.x = x.data();
    p.x_rows = down ? S : rows;
    p.x_row = down ? nullptr : d_xr.data();
    p.num_groups = G;
    p.capacity = S;
    p.max_group_pairs = bounded ? rows : 0;
    p.in_features = in;
    p.out_features = out;
    p.y = y.data();
    p.y_rows = S;
    p.y_row = down ? d_yr.data() : nullptr;
    p.offsets = d_off.data();
    if (!down) p.y_b = y_up.data();
    // Groups first .. first + 8 of the 256 (and of up's 256 for the paired form).
    auto use_groups = [&](size_t first) {
      p.weights_fp8 = w.codes.data() + first;
      p.weight_scales = w.scales.data() + first;
      if (!down) {
        p.weights_fp8_b = w_up.codes.data() + first;
        p.weight_scales_b = w_up.scales.data() + first;
      }
    };
    use_groups(0);  // before the scratch size, which reads that the weights are FP8
    p.scratch_bytes = k::grouped_linear_scratch_bytes(p);
    DSA_ASSIGN_OR_RETURN(auto scratch, DeviceBuffer<uint8_t>::alloc(p.scratch_bytes));
    p.scratch = scratch.data();
    int call = 0;
    auto launch = [&] {
      use_groups(size_t(call++ % (kExperts / G)) * G);
      return k::grouped_linear_cuda(p);
    };
    DSA_RETURN_IF_ERROR(launch());
    DSA_ASSIGN_OR_RETURN(double us, dsa::cuda::median_us(launch, dsa::cuda::current_stream()));
    const double projections = down ? 1.0 : 2.0;
    const double bytes = projections * G * (double(in) * out + kScaleBlocks * 4.0);
    const double tbps = bytes / (us * 1e-6) / 1e12;
    std::printf(
        "grouped_fp8 equiv %-4s T=%-2d %5d -> %-5d %9.2f us  %s  %6.3f TB/s %5.1f%% of 4.28\n",
        down ? "down" : "g+up", rows, in, out, us,
        bounded ? "max_group_pairs T" : "mean rule        ", tbps,
        100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth);
  }
  return dsa::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  // Unchecked, as a release run: checked mode adds validation passes and a device read.
  dsa::ScopedCheckedMode unchecked(false);
  dsa::testing::Rng rng(dsa::testing::test_seed());
  WeightSet gate, up;  // two sets: the paired launch must not find up's weights in L2
  Status st = make_weight_set(&gate);
  if (st.ok()) st = make_weight_set(&up);
  // Rows from the command line (e.g. 4096 alone, for a side-by-side of the two forms), else all.
  std::vector<int32_t> row_counts;
  for (int i = 1; i < argc; ++i) row_counts.push_back(static_cast<int32_t>(std::atoi(argv[i])));
  const bool all = row_counts.empty();
  if (all) row_counts = {1, 8, 32, 128, 4096};
  for (int32_t rows : row_counts) {
    if (!st.ok()) break;
    if (rows < 1 || rows > 65536) {
      std::fprintf(stderr, "grouped_linear_fp8_bench: rows = %d: must be in [1, 65536]\n", rows);
      return 1;
    }
    st = bench_rows(rows, gate.w, up.w, rng);
  }
  for (int32_t rows : {1, 4, 8}) {
    for (const bool bounded : {true, false}) {
      if (st.ok() && all) st = bench_equivalent(rows, gate.w, up.w, bounded, rng);
    }
  }
  if (!st.ok()) {
    std::fprintf(stderr, "grouped_linear_fp8_bench: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
