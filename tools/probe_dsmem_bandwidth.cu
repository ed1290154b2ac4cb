// Probe: how fast does one SM write into the shared memory of the other CTA of a 2-CTA cluster?
// The sparse MLA "crossover" (bench/RESULTS.md, 2026-12-05) sends 32 KB of dequantised rows to the
// peer per 64-key tile and ran slower than no sharing; its leading explanation is that these bytes
// cost more cycles than the dequantisation they save. This measures it: every SM of the GPU (one
// 2-CTA cluster per SM pair, one CTA per SM) pushes ROUNDS x 32 KB to its peer, by st.async
// (counted as transaction bytes on the peer's mbarrier), by st.shared::cluster, and, as the
// baseline, into its own shared memory; each CTA times its transfer with %globaltimer and the
// probe prints bytes per SM-clock (at the SM clock it reads) and the GPU-wide rate.
//
// Build and run (on the GPU machine):
//   nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -ccbin /usr/bin/g++ \
//     tools/probe_dsmem_bandwidth.cu -o probe_dsmem && ./probe_dsmem
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

constexpr int kThreads = 128;
constexpr int kBlockBytes = 32 * 1024;  // one tile's half of the crossover
constexpr int kRounds = 30;             // 960 KB: under the mbarrier's 2^20 - 1 transaction bytes
// Each CTA takes enough shared memory to be alone on its SM.
constexpr int kSmemBytes = 200 * 1024;

enum Mode : int { kStAsync = 0, kStCluster = 1, kLocal = 2 };

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1) push_kernel(uint64_t* ns_out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const uint32_t peer = rank ^ 1u;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();
  if (kMode == kStAsync && threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bar)),
                 "r"(kRounds * kBlockBytes)
                 : "memory");
  }
  cluster_sync();  // every barrier armed before any byte is sent

  uint32_t dst = smem_u32(smem), peer_bar = smem_u32(&bar);
  if (kMode != kLocal) {
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(dst) : "r"(peer));
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(peer_bar) : "r"(peer));
  }
  const uint32_t v = threadIdx.x * 2654435761u;
  const uint64_t t0 = globaltimer();
  for (int r = 0; r < kRounds; ++r) {
    for (int off = threadIdx.x * 16; off < kBlockBytes; off += kThreads * 16) {
      const uint32_t a = dst + uint32_t(off);
      if constexpr (kMode == kStAsync) {
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
            "[%5];" ::"r"(a),
            "r"(v), "r"(v + r), "r"(v), "r"(v), "r"(peer_bar)
            : "memory");
      } else if constexpr (kMode == kStCluster) {
        asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v),
                     "r"(v + r), "r"(v), "r"(v)
                     : "memory");
      } else {
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v), "r"(v + r),
                     "r"(v), "r"(v)
                     : "memory");
      }
    }
  }
  if constexpr (kMode == kStAsync) {
    // This CTA's barrier completes when the peer's 960 KB have landed here.
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(smem_u32(&bar))
          : "memory");
    }
  } else {
    cluster_sync();  // both CTAs' stores performed
  }
  const uint64_t t1 = globaltimer();
  if (threadIdx.x == 0) ns_out[blockIdx.x] = t1 - t0;
  cluster_sync();  // neither CTA leaves while its peer may still write to it
}

template <int kMode>
void run(const char* name, int ctas, uint64_t* d_ns, double sm_ghz) {
  auto kernel = push_kernel<kMode>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  std::vector<double> per_sm;
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaLaunchKernelEx(&cfg, kernel, d_ns));
    CK(cudaDeviceSynchronize());
    std::vector<uint64_t> ns(ctas);
    CK(cudaMemcpy(ns.data(), d_ns, ctas * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    std::sort(ns.begin(), ns.end());
    per_sm.push_back(double(ns[ctas / 2]));  // median CTA
  }
  std::sort(per_sm.begin(), per_sm.end());
  const double med_ns = per_sm[per_sm.size() / 2];
  const double bytes = double(kRounds) * kBlockBytes;
  std::printf(
      "probe=dsmem mode=%s ctas=%d bytes_per_cta=%.0f median_ns=%.0f B_per_ns_per_sm=%.2f "
      "B_per_clk_per_sm=%.2f gpu_TBps=%.2f cycles_per_32KB=%.0f\n",
      name, ctas, bytes, med_ns, bytes / med_ns, bytes / med_ns / sm_ghz,
      bytes * ctas / med_ns / 1e3, kBlockBytes / (bytes / med_ns / sm_ghz));
}

}  // namespace

int main() {
  int dev = 0, sms = 0, clock_khz = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const double ghz = clock_khz / 1e6;
  std::printf("device name=\"%s\" sms=%d sm_clock_GHz=%.3f (the rated clock: B/clk assumes it)\n",
              prop.name, sms, ghz);
  const int ctas = sms / 2 * 2;
  uint64_t* d_ns = nullptr;
  CK(cudaMalloc(&d_ns, ctas * sizeof(uint64_t)));
  run<kLocal>("local_st_shared", ctas, d_ns, ghz);
  run<kStCluster>("st_shared_cluster", ctas, d_ns, ghz);
  run<kStAsync>("st_async", ctas, d_ns, ghz);
  CK(cudaFree(d_ns));
  return 0;
}
