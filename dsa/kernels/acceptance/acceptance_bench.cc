// Acceptance benchmark at the V3.2 vocabulary (V = 129,280): accept_drafts_cuda over B requests of
// d drafts, for greedy rows (the sampling kernel at temperature 0, and the op's `greedy` form: the
// argmax kernel), unfiltered sampling, top-k 50, top-p 0.9 and top-k 50 + top-p 0.9.
// Every verify row is read at least once per pass (greedy: once; filtered: the radix passes of
// kernels/common/sample_row.cuh), so the figure printed is the time per call (median of 50) and
// the logits bytes read once, as GB/s. Logits are N(0, 2).
//   usage: acceptance_bench
#include <cuda_runtime.h>

#include <cstdio>
#include <span>
#include <utility>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/testing/random.h"

namespace {

using dsa::Status;
using dsa::cuda::DeviceBuffer;

constexpr int32_t kVocab = 129280;

struct Mode {
  const char* name;
  float temperature, top_p;
  int32_t top_k;
  bool greedy = false;  // AcceptanceParams::greedy
};

Status bench_shape(int32_t B, int32_t d, dsa::testing::Rng& rng) {
  const int32_t n = d + 1;
  const size_t cells = size_t(B) * n * kVocab;
  DSA_ASSIGN_OR_RETURN(auto logits, DeviceBuffer<float>::from_host(
                                        std::span<const float>(rng.normal_vector(cells, 2.f))));
  std::vector<int32_t> hd(size_t(B) * d + 1);
  for (auto& g : hd) g = int32_t(rng.randint(0, kVocab - 1));
  std::vector<int32_t> hfirst(size_t(B), 1000);
  std::vector<uint64_t> hseed(static_cast<size_t>(B));
  for (auto& s : hseed) s = rng.engine()();
  DSA_ASSIGN_OR_RETURN(auto drafts, DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(hd)));
  DSA_ASSIGN_OR_RETURN(auto first,
                       DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(hfirst)));
  DSA_ASSIGN_OR_RETURN(auto seed,
                       DeviceBuffer<uint64_t>::from_host(std::span<const uint64_t>(hseed)));
  DSA_ASSIGN_OR_RETURN(auto accepted, DeviceBuffer<int32_t>::alloc(size_t(B)));
  DSA_ASSIGN_OR_RETURN(auto emitted, DeviceBuffer<int32_t>::alloc(size_t(B) * n));
  const Mode modes[] = {{"greedy", 0.f, 1.f, 0},     {"greedy op", 0.f, 1.f, 0, true},
                        {"sampled", 1.f, 1.f, 0},    {"top-k 50", 1.f, 1.f, 50},
                        {"top-p 0.9", 1.f, 0.9f, 0}, {"k 50 p 0.9", 1.f, 0.9f, 50}};
  for (const Mode& m : modes) {
    DSA_ASSIGN_OR_RETURN(auto t, DeviceBuffer<float>::from_host(std::span<const float>(
                                     std::vector<float>(size_t(B), m.temperature))));
    DSA_ASSIGN_OR_RETURN(auto p, DeviceBuffer<float>::from_host(std::span<const float>(
                                     std::vector<float>(size_t(B), m.top_p))));
    DSA_ASSIGN_OR_RETURN(auto k, DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(
                                     std::vector<int32_t>(size_t(B), m.top_k))));
    dsa::kernels::AcceptanceParams a;
    a.logits = logits.data();
    a.requests = B;
    a.drafts_per_request = d;
    a.vocab = kVocab;
    a.drafts = drafts.data();
    a.temperature = t.data();
    a.top_p = p.data();
    a.top_k = k.data();
    a.seed = seed.data();
    a.first_position = first.data();
    a.accepted = accepted.data();
    a.emitted = emitted.data();
    a.greedy = m.greedy;
    DSA_ASSIGN_OR_RETURN(double us,
                         dsa::cuda::median_us([&] { return dsa::kernels::accept_drafts_cuda(a); },
                                              dsa::cuda::current_stream()));
    const double bytes = double(cells) * sizeof(float);
    std::printf("acceptance %-11s B=%-4d d=%d V=%d %9.2f us %9.1f MB %8.1f GB/s (logits once)\n",
                m.name, B, d, kVocab, us, bytes / 1e6, bytes / (us * 1e-6) / 1e9);
  }
  return dsa::ok_status();
}

}  // namespace

int main() {
  // Unchecked, as a release run: checked mode would add a device-to-host read per launch.
  dsa::ScopedCheckedMode unchecked(false);
  dsa::testing::Rng rng(1);
  for (auto [B, d] : {std::pair{1, 3}, std::pair{16, 3}, std::pair{64, 3}, std::pair{64, 1}}) {
    if (Status s = bench_shape(B, d, rng); !s.ok()) {
      std::fprintf(stderr, "acceptance_bench: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
