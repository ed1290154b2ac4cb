// Phase clocks of the one-pass top-k kernel: block 0 stamps %globaltimer at the end of each phase
// (prologue, copy issue, pass 1, row barrier, first bin search, classification, selection,
// final) and every block its entry and end, which give the kernel's span. The phases are
// compiled in only with DSA_TOPK_PROFILE, which this file defines before including the launcher.
// Warm L2 (one buffer), events around each call include the host's launch work.
//
// Build and run (on the GPU machine, after scripts/gpu_op.sh topk built build-gpu):
//   nvcc -I. -O3 -std=c++20 -lineinfo -gencode=arch=compute_90a,code=sm_90a -ccbin /usr/bin/g++ \
//     --expt-relaxed-constexpr tools/topk_phase_profile.cu -o topk_phase_profile \
//     build-gpu/dsa/kernels/topk/libdsa_op_topk.a build-gpu/dsa/cuda/libdsa_cuda.a \
//     build-gpu/dsa/core/libdsa_core.a -lfmt -lspdlog
//   ./topk_phase_profile ROWS LEN [CLUSTER_SIZE]
#define DSA_TOPK_PROFILE
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/topk/topk_cuda.cu"

int main(int argc, char** argv) {
  int rows = argc > 1 ? atoi(argv[1]) : 32, len = argc > 2 ? atoi(argv[2]) : 8192;
  int cl = argc > 3 ? atoi(argv[3]) : 0;
  dsa::set_checked_mode(false);
  std::vector<float> h(size_t(rows) * len);
  uint64_t x = 88172645463325252ull;
  for (auto& v : h) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u1 = ((x >> 11) + 0.5) / 9007199254740992.0;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u2 = ((x >> 11) + 0.5) / 9007199254740992.0;
    v = float(sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
  }
  std::vector<int> lens(rows, len);
  float* dl;
  int* dlen;
  int* didx;
  cudaMalloc(&dl, h.size() * 4);
  cudaMalloc(&dlen, rows * 4);
  cudaMalloc(&didx, rows * 2048 * 4);
  cudaMemcpy(dl, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dlen, lens.data(), rows * 4, cudaMemcpyHostToDevice);
  dsa::kernels::TopkParams p;
  p.logits = dl;
  p.logits_ld = len;
  p.rows = rows;
  p.len = dlen;
  p.k = 2048;
  p.out_rows = rows;
  p.idx = didx;
  p.cluster_size = cl;
  std::vector<std::vector<double>> d(9);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ev;
  std::vector<double> span;
  for (int it = 0; it < 30; ++it) {
    cudaEventRecord(e0);
    auto st = dsa::kernels::topk_cuda(p);
    cudaEventRecord(e1);
    cudaDeviceSynchronize();
    if (!st.ok()) {
      printf("%s\n", st.to_string().c_str());
      return 1;
    }
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    ev.push_back(ms * 1000);
    unsigned long long t[16];
    cudaMemcpyFromSymbol(t, dsa::kernels::topk_detail::g_topk_prof, sizeof(t));
    for (int i = 1; i <= 8; ++i) d[i].push_back((t[i] - t[i - 1]) / 1000.0);
    static unsigned long long sp[2][4096];
    cudaMemcpyFromSymbol(sp, dsa::kernels::topk_detail::g_topk_span, sizeof(sp));
    unsigned long long lo = ~0ull, hi = 0;
    int nb = std::min(4096, rows * 8);
    for (int b = 0; b < nb && b < 4096; ++b) {
      if (sp[0][b]) lo = std::min(lo, sp[0][b]);
      if (sp[1][b] > hi) hi = sp[1][b];
    }
    span.push_back(hi > lo ? (hi - lo) / 1000.0 : 0);
    cudaMemset((void*)0, 0, 0);
  }
  const char* names[] = {"",          "begin_row", "issue+clear", "pass1", "row_sync",
                         "find_bin1", "classify",  "passes2-4",   "final"};
  printf("rows=%d len=%d cluster=%d event_us median %.2f\n", rows, len, cl, [&] {
    auto v = ev;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }());
  {
    auto v = span;
    std::sort(v.begin(), v.end());
    printf("  span(first entry..last select end, blocks<%d) %.2f us\n", rows, v[v.size() / 2]);
  }
  for (int i = 1; i <= 8; ++i) {
    auto v = d[i];
    std::sort(v.begin(), v.end());
    printf("  %-12s %8.2f us\n", names[i], v[v.size() / 2]);
  }
  return 0;
}
