// GPU tests only: poisoned buffers. Outputs are filled with a byte pattern (or random bytes) before
// an op runs, so a test proves which elements the op wrote and that the others kept their poison.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/random.h"

namespace dsa::testing {

// All ones: a NaN in bf16 and fp32 (never a value an op computes from finite inputs), -1 in int32.
inline constexpr uint8_t kPoisonByte = 0xFF;

// `count` device elements with every byte `byte`.
template <typename T>
cuda::DeviceBuffer<T> poisoned(size_t count, uint8_t byte = kPoisonByte) {
  cuda::DeviceBuffer<T> d = dev_alloc<T>(count);
  or_die(d.fill_bytes(byte));
  return d;
}

// The host value whose every byte is `byte` (what a poisoned element reads back as).
template <typename T>
T poison_value(uint8_t byte = kPoisonByte) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memset(&v, byte, sizeof(T));
  return v;
}

// True when every byte of `v` is `byte`: the element was not written.
template <typename T>
bool is_poison(const T& v, uint8_t byte = kPoisonByte) {
  static_assert(std::is_trivially_copyable_v<T>);
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  return std::all_of(b, b + sizeof(T), [byte](unsigned char c) { return c == byte; });
}

// Poisons `out`, runs `op`, waits for the current stream and downloads `out` into *result; returns
// the op's Status (or the harness failure that kept the result from coming back).
template <typename T, typename Op>
Status run_poisoned(cuda::DeviceBuffer<T>& out, Op&& op, std::vector<T>* result) {
  DSA_RETURN_IF_ERROR(out.fill_bytes(kPoisonByte));
  Status st = op();
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cuda::current_stream()));
  DSA_ASSIGN_OR_RETURN(*result, out.download());
  return st;
}

// A [rows, ld] output whose row r is defined on its first len(r) columns: those within bound[i]
// of the reference, every other column still poison. The first 8 bad columns are reported.
inline void expect_rows_within_bound(const std::vector<float>& got, const std::vector<float>& ref,
                                     const std::vector<float>& bound, int64_t rows, int64_t ld,
                                     const std::function<int64_t(int64_t)>& len) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = len(r);
    for (int64_t s = 0; s < ld; ++s) {
      const size_t i = size_t(r * ld + s);
      const bool ok = s < n ? std::fabs(got[i] - ref[i]) <= bound[i] : is_poison(got[i]);
      if (!ok && ++bad <= 8) {
        ADD_FAILURE() << "row " << r << " col " << s << " (len " << n << "): got " << got[i]
                      << " ref " << ref[i] << " bound " << bound[i];
      }
    }
  }
  EXPECT_EQ(bad, 0) << "mismatching columns (seed " << test_seed() << ")";
}

// Random bytes, 8 at a time from the engine: a poison that differs from run to run (NaN payloads
// included) for outputs compared whole, written or not.
inline void fill_random_bytes(Rng& rng, uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t word = rng.engine()();
    std::memcpy(bytes + i, &word, std::min<size_t>(8, n - i));
  }
}

template <typename T>
std::vector<T> random_bytes(Rng& rng, size_t count) {
  std::vector<T> v(count);
  fill_random_bytes(rng, reinterpret_cast<uint8_t*>(v.data()), count * sizeof(T));
  return v;
}

// A pool image of `bytes` bytes: zeros over the first `zero_prefix` (page 0, reserved), one random
// byte per byte after it — the garbage unwritten slots hold, which a cache write must keep.
inline std::vector<uint8_t> random_pool_image(Rng& rng, size_t bytes, size_t zero_prefix) {
  std::vector<uint8_t> image(bytes, 0);
  for (size_t i = zero_prefix; i < image.size(); ++i) image[i] = uint8_t(rng.randint(0, 255));
  return image;
}

}  // namespace dsa::testing
