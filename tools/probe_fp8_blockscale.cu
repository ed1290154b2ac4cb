// Probe: does cuBLASLt on this GPU run an FP8 GEMM with a 128x128 block-scaled weight
// (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) and 1x128 activation scales (VEC128_32F), and in
// which memory order does it read each scale tensor? The cuBLAS headers name the modes but not
// the order, so this tries each candidate order against a double-precision reference and prints
// the error of each; then it times the V3.2 shapes with the order that matches.
//
// Build and run (on the GPU machine):
//   nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -ccbin /usr/bin/g++ \
//     tools/probe_fp8_blockscale.cu -lcublasLt -o probe && ./probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
#define LK(x)                                                                               \
  do {                                                                                      \
    cublasStatus_t s_ = (x);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::printf("cuBLASLt %s at %s:%d\n", cublasLtGetStatusName(s_), __FILE__, __LINE__); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }
int round4(int a) { return (a + 3) / 4 * 4; }

float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return static_cast<float>(v);
}
uint8_t e4m3_code(float f) { return __nv_fp8_e4m3(f).__x; }

// Host operands: W8 [out, in] codes with sw [ceil(out/128)][ceil(in/128)] (row-major, as a V3.2
// checkpoint stores weight_scale_inv), x8 [T, in] codes with sx [T][ceil(in/128)].
struct Problem {
  int T, in, out, kb, ob;
  std::vector<uint8_t> w8, x8;
  std::vector<float> sw, sx;
  std::vector<int> samples;  // t * out + o of the outputs checked (all of them when small)
  std::vector<double> ref;   // per sample
  std::vector<double> mag;   // per sample: sum |terms|
};

Problem make_problem(int T, int in, int out, uint32_t seed) {
  Problem p{T, in, out, cdiv(in, 128), cdiv(out, 128), {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-400.f, 400.f);
  std::uniform_int_distribution<int> ex(-12, -2);
  p.w8.resize(size_t(out) * in);
  p.x8.resize(size_t(T) * in);
  for (auto& c : p.w8) c = e4m3_code(u(rng));
  for (auto& c : p.x8) c = e4m3_code(u(rng));
  p.sw.resize(size_t(p.ob) * p.kb);
  p.sx.resize(size_t(T) * p.kb);
  for (auto& s : p.sw) s = std::ldexp(1.f, ex(rng));
  for (auto& s : p.sx) s = std::ldexp(1.f, ex(rng));
  const size_t n = size_t(T) * out;
  if (n <= 4096) {
    for (size_t i = 0; i < n; ++i) p.samples.push_back(int(i));
  } else {
    std::uniform_int_distribution<size_t> pick(0, n - 1);
    for (int i = 0; i < 2048; ++i) p.samples.push_back(int(pick(rng)));
    p.samples.push_back(int(n - 1));
    p.samples.push_back(out - 1);
    p.samples.push_back(int(n - out));
  }
  for (int i : p.samples) {
    const int t = i / out, o = i % out;
    double acc = 0, mag = 0;
    for (int j = 0; j < in; ++j) {
      const double v = double(e4m3_value(p.x8[size_t(t) * in + j])) *
                       p.sx[size_t(t) * p.kb + j / 128] * e4m3_value(p.w8[size_t(o) * in + j]) *
                       p.sw[size_t(o / 128) * p.kb + j / 128];
      acc += v;
      mag += std::fabs(v);
    }
    p.ref.push_back(acc);
    p.mag.push_back(mag);
  }
  return p;
}

// Candidate orders. Weight scales: 0 = [ob][kb] (kb fastest), 1 = [kb][ob], 2 = [kb][round4(ob)].
// Activation scales: 0 = [t][kb], 1 = [kb][T], 2 = [kb][round4(T)].
std::vector<float> weight_scales(const Problem& p, int order) {
  const int ld = order == 2 ? round4(p.ob) : p.ob;
  std::vector<float> s(order == 0 ? p.sw.size() : size_t(ld) * p.kb, 0.f);
  for (int i = 0; i < p.ob; ++i)
    for (int k = 0; k < p.kb; ++k)
      s[order == 0 ? size_t(i) * p.kb + k : size_t(k) * ld + i] = p.sw[size_t(i) * p.kb + k];
  return s;
}
std::vector<float> act_scales(const Problem& p, int order) {
  const int ld = order == 2 ? round4(p.T) : p.T;
  std::vector<float> s(order == 0 ? p.sx.size() : size_t(ld) * p.kb, 0.f);
  for (int t = 0; t < p.T; ++t)
    for (int k = 0; k < p.kb; ++k)
      s[order == 0 ? size_t(t) * p.kb + k : size_t(k) * ld + t] = p.sx[size_t(t) * p.kb + k];
  return s;
}

struct Gemm {
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
};

// One cuBLASLt configuration. swap = false: A = W (BLK128x128), B = x (VEC128), D = [out, T]
// column-major (y row-major). swap = true: A = x (VEC128), B = W (BLK128x128), D = [T, out],
// column- or (d_row) row-major; row-major D is y itself.
struct Config {
  bool swap = false, fp32_out = false, d_row = false;
};

const char* describe(const Config& c) {
  static char buf[96];
  std::snprintf(buf, sizeof buf, "%s D %s %s",
                c.swap ? "A=x(VEC128) B=W(BLK)" : "A=W(BLK) B=x(VEC128)",
                c.fp32_out ? "f32" : "bf16", c.d_row ? "row-major" : "col-major");
  return buf;
}

Gemm plan(cublasLtHandle_t h, int T, int in, int out, const float* dsw, const float* dsx,
          const Config& cfg, size_t ws_bytes) {
  Gemm g;
  LK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtMatmulMatrixScale_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                    vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const cublasLtMatmulMatrixScale_t ma = cfg.swap ? vec : blk, mb = cfg.swap ? blk : vec;
  const float* sa = cfg.swap ? dsx : dsw;
  const float* sb = cfg.swap ? dsw : dsx;
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
  const int rows_a = cfg.swap ? T : out, rows_b = cfg.swap ? out : T;
  LK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8F_E4M3, in, rows_a, in));
  LK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8F_E4M3, in, rows_b, in));
  const auto dt = cfg.fp32_out ? CUDA_R_32F : CUDA_R_16BF;
  if (cfg.d_row) {
    LK(cublasLtMatrixLayoutCreate(&g.c, dt, rows_a, rows_b, rows_b));
    const cublasLtOrder_t order = CUBLASLT_ORDER_ROW;
    LK(cublasLtMatrixLayoutSetAttribute(g.c, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
  } else {
    LK(cublasLtMatrixLayoutCreate(&g.c, dt, rows_a, rows_b, rows_a));
  }
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                          sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  g.why = cublasLtMatmulAlgoGetHeuristic(h, g.desc, g.a, g.b, g.c, g.c, pref, 1, &r, &found);
  g.ok = g.why == CUBLAS_STATUS_SUCCESS && found > 0;
  if (g.ok) g.algo = r.algo;
  cublasLtMatmulPreferenceDestroy(pref);
  return g;
}

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T)));
  CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Worst |got - ref| / (2^-8 M + 2^-7 |ref|) over the outputs: <= 1 meets SPEC.md §8.8's class T.
double check_order(cublasLtHandle_t h, const Problem& p, const Config& cfg, int wo, int xo,
                   void* ws, size_t wsb) {
  auto sw = weight_scales(p, wo);
  auto sx = act_scales(p, xo);
  uint8_t* dw = upload(p.w8);
  uint8_t* dx = upload(p.x8);
  float* dsw = upload(sw);
  float* dsx = upload(sx);
  float* dy = nullptr;
  CK(cudaMalloc(&dy, size_t(p.T) * p.out * 4));
  Gemm g = plan(h, p.T, p.in, p.out, dsw, dsx, cfg, wsb);
  double worst = -1;
  if (!g.ok) {
    std::printf("  %s order w%d x%d: no algorithm (%s)\n", describe(cfg), wo, xo,
                cublasLtGetStatusName(g.why));
  } else {
    const float one = 1, zero = 0;
    const void* da = cfg.swap ? static_cast<void*>(dx) : dw;
    const void* db = cfg.swap ? static_cast<void*>(dw) : dx;
    const cublasStatus_t s = cublasLtMatmul(h, g.desc, &one, da, g.a, db, g.b, &zero, dy, g.c, dy,
                                            g.c, &g.algo, ws, wsb, 0);
    CK(cudaDeviceSynchronize());
    if (s != CUBLAS_STATUS_SUCCESS) {
      std::printf("  %s order w%d x%d: matmul %s\n", describe(cfg), wo, xo,
                  cublasLtGetStatusName(s));
    } else {
      const size_t n = size_t(p.T) * p.out;
      std::vector<float> f(n);
      std::vector<__nv_bfloat16> b(n);
      if (cfg.fp32_out) {
        CK(cudaMemcpy(f.data(), dy, n * 4, cudaMemcpyDeviceToHost));
      } else {
        CK(cudaMemcpy(b.data(), dy, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(b[i]);
      }
      worst = 0;
      double ratio = 0;
      for (size_t si = 0; si < p.samples.size(); ++si) {
        const int t = p.samples[si] / p.out, o = p.samples[si] % p.out;
        const size_t at = cfg.swap && !cfg.d_row ? size_t(o) * p.T + t : size_t(p.samples[si]);
        const double bound = std::ldexp(p.mag[si], -8) + std::ldexp(std::fabs(p.ref[si]), -7);
        const double e = std::fabs(f[at] - p.ref[si]) / bound;
        if (e > worst) worst = e, ratio = f[at] / p.ref[si];
      }
      if (worst > 1) std::printf("    (worst sample: got/ref = %.4g)\n", ratio);
      std::printf("  %s order w%d x%d: worst error / class-T bound = %.3g\n", describe(cfg), wo, xo,
                  worst);
    }
  }
  cudaFree(dw), cudaFree(dx), cudaFree(dsw), cudaFree(dsx), cudaFree(dy);
  return worst;
}

// Median time of one GEMM with cold weights (rotating copies past the 60 MB L2).
void time_shape(cublasLtHandle_t h, int T, int in, int out, const Config& cfg, int wo, int xo,
                void* ws, size_t wsb) {
  const size_t wbytes = size_t(out) * in;
  const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / wbytes + 1));
  std::vector<uint8_t*> dw(copies);
  for (auto& d : dw) {
    CK(cudaMalloc(&d, wbytes));
    CK(cudaMemset(d, 0x38, wbytes));  // e4m3 1.0
  }
  const int kb = cdiv(in, 128), ob = cdiv(out, 128);
  const size_t swn = wo == 0 ? size_t(ob) * kb : size_t(kb) * (wo == 2 ? round4(ob) : ob);
  const size_t sxn = xo == 0 ? size_t(T) * kb : size_t(kb) * (xo == 2 ? round4(T) : T);
  std::vector<float> ones_w(swn, 1.f / 1024), ones_x(sxn, 1.f / 1024);
  float* dsw = upload(ones_w);
  float* dsx = upload(ones_x);
  uint8_t* dx;
  CK(cudaMalloc(&dx, size_t(T) * in));
  CK(cudaMemset(dx, 0x38, size_t(T) * in));
  void* dy;
  CK(cudaMalloc(&dy, size_t(T) * out * 2));
  Gemm g = plan(h, T, in, out, dsw, dsx, cfg, wsb);
  if (!g.ok) {
    std::printf("%6d %6d %6d  no algorithm (%s)\n", T, in, out, cublasLtGetStatusName(g.why));
    return;
  }
  const float one = 1, zero = 0;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 60; ++it) {
    CK(cudaEventRecord(e0));
    const void* w = dw[it % copies];
    LK(cublasLtMatmul(h, g.desc, &one, cfg.swap ? static_cast<const void*>(dx) : w, g.a,
                      cfg.swap ? w : static_cast<const void*>(dx), g.b, &zero, dy, g.c, dy, g.c,
                      &g.algo, ws, wsb, 0));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 10) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double us = ms[ms.size() / 2] * 1e3;
  const double bytes = double(wbytes) + double(T) * in + double(T) * out * 2 + 4.0 * (swn + sxn);
  const double flops = 2.0 * T * in * out;
  const double roof_us = std::max(bytes / 4.28e12, flops / 1500e12) * 1e6;
  std::printf("%6d %6d %6d  %9.2f us  %7.1f GB/s  %7.1f TFLOP/s  %5.1f%% of roofline\n", T, in, out,
              us, bytes / us * 1e-3, flops / us * 1e-6, 100 * roof_us / us);
  for (auto d : dw) cudaFree(d);
  cudaFree(dsw), cudaFree(dsx), cudaFree(dx), cudaFree(dy);
}

}  // namespace

int main() {
  cublasLtHandle_t h;
  LK(cublasLtCreate(&h));
  std::printf("cuBLASLt version %zu\n", cublasLtGetVersion());
  const size_t wsb = size_t(32) << 20;
  void* ws;
  CK(cudaMalloc(&ws, wsb));
  const Config configs[] = {{false, false, false}, {true, false, true}};
  const int shapes[][2] = {{7168, 1536},  {7168, 576},  {7168, 4096}, {1536, 24576},
                           {16384, 7168}, {2048, 7168}, {1664, 640}};
  std::printf("scales: weight [ob][kb], activations [kb][T]\n");
  for (int T : {1, 2, 4, 8, 16, 32, 64, 128, 256})
    for (const auto& sh : shapes) {
      std::printf("T %d in %d out %d\n", T, sh[0], sh[1]);
      Problem p = make_problem(T, sh[0], sh[1], 99u + T);
      for (const Config& cfg : configs) check_order(h, p, cfg, 0, 1, ws, wsb);
    }
  for (const Config& cfg : configs) {
    std::printf("== %s\n", describe(cfg));
    std::printf("     T     in    out  (cold weights, median of 50)\n");
    for (int T : {1, 4, 16, 32, 64, 128, 4096})
      for (const auto& sh : shapes) time_shape(h, T, sh[0], sh[1], cfg, 0, 1, ws, wsb);
  }
  return 0;
}
