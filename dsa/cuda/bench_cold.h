// Cold-L2 timing and shape arguments for the side-by-side benchmarks against the peer kernels
// (scripts/bench_vs_peers.sh), with the method of the anchors kit (shared/anchors/README.md,
// "Timing method"), so that dsa's figures and DeepGEMM's, FlashMLA's and TensorRT-LLM's differ
// only by the kernels:
//  * the caller keeps `copies` disjoint copies of every input and output one call touches, with
//    copies x bytes >= 4 x L2 and at least 2 copies, and the launch rotates through them: a timed
//    call then reads data that >= 4 L2 of other traffic has passed since it was last touched, as a
//    layer's K cache is when the other layers of a forward ran in between;
//  * 5 warm-up calls, then the stream is held at a host gate while every timed call is enqueued
//    behind it, so no call waits for the host (the anchors queue a busy-wait kernel for the same
//    purpose; a host function needs no device code in a host-compiled benchmark);
//  * CUDA events bracket each call on the stream; the median over >= 50 calls is reported, with
//    min and max, and the mean idle time between consecutive calls, which shows that the gate
//    held (it is ~0 when every call was queued in time).
// Output lines are grep-able key=value lines like the anchors': "bench=<name> <shape> us=...".
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/cuda_check.h"

namespace dsa::cuda {

struct ColdTiming {
  double median_us = 0, min_us = 0, max_us = 0;
  double gap_us = 0;  // mean GPU idle time between the end of one call and the next call's start
  int copies = 1, iters = 0;
  bool gate_held = true;  // false: the gate timed out before every call was enqueued
};

// Disjoint copies so that copies x bytes_per_call >= 4 x L2 (the device's), at least 2.
inline StatusOr<int> cold_copies(double bytes_per_call) {
  int dev = 0;
  DSA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  int l2 = 0;
  DSA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const double need = 4.0 * double(l2) / std::max(bytes_per_call, 1.0);
  return std::max(2, int(std::ceil(need)));
}

// Fills pages [1, pages) of a device pool of `page_bytes` pages with copies of the `tmpl_pages`
// template pages already at page 1, doubling what is filled each copy (a pool of gigabytes is
// filled in log2 steps, not from the host). Page 0 is left as it is.
inline Status fill_pool_by_doubling(uint8_t* pool, int64_t pages, int64_t page_bytes,
                                    int64_t tmpl_pages) {
  for (int64_t done = tmpl_pages; done < pages - 1;) {
    const int64_t chunk = std::min(done, pages - 1 - done);
    DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy(pool + (1 + done) * page_bytes, pool + page_bytes,
                                        size_t(chunk * page_bytes), cudaMemcpyDeviceToDevice));
    done += chunk;
  }
  return ok_status();
}

namespace detail {
// The stream's gate: a host function that returns once the host has enqueued every timed call
// (or after 2 s, so that a full launch queue, which would block the host, cannot deadlock).
struct HostGate {
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
};
inline void CUDART_CB wait_gate(void* arg) {
  auto* gate = static_cast<HostGate*>(arg);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!gate->open.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate->timed_out.store(true);
      return;
    }
    std::this_thread::yield();
  }
}
}  // namespace detail

// Times launch(copy) (which enqueues one call on `stream`, reading copy `copy` of its inputs)
// with the method above. Copies rotate round-robin from the warm-ups on.
inline StatusOr<ColdTiming> cold_median_us(const std::function<Status(int copy)>& launch,
                                           int copies, cudaStream_t stream, int iters = 50,
                                           int warmup = 5) {
  copies = std::max(copies, 1);
  iters = std::max(iters, 1);
  int next = 0;
  for (int i = 0; i < warmup; ++i) {
    DSA_RETURN_IF_ERROR(launch(next));
    next = (next + 1) % copies;
  }
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    DSA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start[size_t(i)]));
    DSA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop[size_t(i)]));
  }
  detail::HostGate gate;
  DSA_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(stream, detail::wait_gate, &gate));
  Status enqueued = ok_status();
  for (int i = 0; i < iters && enqueued.ok(); ++i) {
    if (cudaError_t e = cudaEventRecord(start[size_t(i)], stream); e != cudaSuccess) {
      enqueued = cuda_status(e, "cudaEventRecord", __FILE__, __LINE__);
      break;
    }
    enqueued = launch(next);
    next = (next + 1) % copies;
    if (cudaError_t e = cudaEventRecord(stop[size_t(i)], stream); enqueued.ok() && e != cudaSuccess)
      enqueued = cuda_status(e, "cudaEventRecord", __FILE__, __LINE__);
  }
  gate.open.store(true, std::memory_order_release);  // always, so the stream drains
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  DSA_RETURN_IF_ERROR(enqueued);
  std::vector<double> us(static_cast<size_t>(iters));
  double idle_ms = 0;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    DSA_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start[size_t(i)], stop[size_t(i)]));
    us[size_t(i)] = double(ms) * 1000.0;
    if (i > 0) {
      float gap = 0;
      DSA_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&gap, stop[size_t(i - 1)], start[size_t(i)]));
      idle_ms += gap;
    }
  }
  for (int i = 0; i < iters; ++i) {
    cudaEventDestroy(start[size_t(i)]);
    cudaEventDestroy(stop[size_t(i)]);
  }
  ColdTiming t;
  t.copies = copies;
  t.iters = iters;
  t.gate_held = !gate.timed_out.load();
  t.gap_us = iters > 1 ? idle_ms * 1000.0 / (iters - 1) : 0.0;
  t.min_us = *std::min_element(us.begin(), us.end());
  t.max_us = *std::max_element(us.begin(), us.end());
  std::nth_element(us.begin(), us.begin() + long(us.size() / 2), us.end());
  t.median_us = us[us.size() / 2];
  return t;
}

// The §10 lower bound of one call: max(bytes / 4.28 TB/s, flops / peak), in µs.
inline double roof_us(double bytes, double flops, double peak_flops) {
  const double mem = bytes / kH200Bandwidth;
  const double math = peak_flops > 0 ? flops / peak_flops : 0.0;
  return std::max(mem, math) * 1e6;
}

// "bench=<name> <shape> us=.. min_us=.. max_us=.. bytes=.. flops=.. roof_us=.. roof_frac=..
// <extra> copies=.. iters=.. gap_us=.. gate=held|timed_out" on stdout, flushed.
inline void print_cold_line(std::string_view name, std::string_view shape, const ColdTiming& t,
                            double bytes, double flops, double peak_flops, std::string_view extra) {
  const double roof = roof_us(bytes, flops, peak_flops);
  std::printf(
      "bench=%.*s %.*s us=%.1f min_us=%.1f max_us=%.1f bytes=%.0f flops=%.0f roof_us=%.2f "
      "roof_frac=%.3f %.*s copies=%d iters=%d gap_us=%.2f gate=%s\n",
      int(name.size()), name.data(), int(shape.size()), shape.data(), t.median_us, t.min_us,
      t.max_us, bytes, flops, roof, roof / t.median_us, int(extra.size()), extra.data(), t.copies,
      t.iters, t.gap_us, t.gate_held ? "held" : "timed_out");
  std::fflush(stdout);
}

// Shape arguments of the peer mode, as the anchors take them: "--shape k=v,k=v" (repeatable; a
// K suffix multiplies by 1024), "--iters N" (timed calls, at least 30; default 50).
using ShapeArg = std::map<std::string, int64_t>;

struct PeerArgs {
  std::vector<ShapeArg> shapes;  // empty: the benchmark's default (legacy) output
  int iters = 50;
};

inline StatusOr<ShapeArg> parse_shape(std::string_view spec) {
  ShapeArg shape;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      return invalid_argument("--shape: expected key=value, got '" + std::string(item) + "'");
    std::string value(item.substr(eq + 1));
    int64_t mult = 1;
    if (value.back() == 'K' || value.back() == 'k') mult = 1024, value.pop_back();
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 0)
      return invalid_argument("--shape: bad value in '" + std::string(item) + "'");
    shape[std::string(item.substr(0, eq))] = int64_t(v) * mult;
  }
  return shape;
}

inline StatusOr<PeerArgs> parse_peer_args(int argc, char** argv) {
  PeerArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    std::string_view value;
    const bool has_next = i + 1 < argc;
    if (a == "--shape" || a == "--iters") {
      if (!has_next) return invalid_argument(std::string(a) + " needs a value");
      value = argv[++i];
    } else if (a.starts_with("--shape=") || a.starts_with("--iters=")) {
      value = a.substr(a.find('=') + 1);
    } else {
      return invalid_argument("unknown argument '" + std::string(a) + "'");
    }
    if (a.starts_with("--shape")) {
      DSA_ASSIGN_OR_RETURN(ShapeArg s, parse_shape(value));
      args.shapes.push_back(std::move(s));
    } else {
      args.iters = std::atoi(std::string(value).c_str());
      if (args.iters < 30) return invalid_argument("--iters must be >= 30");
    }
  }
  return args;
}

// shape[key], or `fallback` when absent; InvalidArgument when absent without a fallback.
inline StatusOr<int64_t> shape_value(const ShapeArg& shape, const char* key,
                                     int64_t fallback = -1) {
  const auto it = shape.find(key);
  if (it != shape.end()) return it->second;
  if (fallback >= 0) return fallback;
  return invalid_argument(std::string("--shape: missing ") + key + "=");
}

}  // namespace dsa::cuda
