#include "dsa/testing/random.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace dsa::testing {

uint64_t test_seed() {
  static const uint64_t seed = [] {
    uint64_t s;
    if (const char* env = std::getenv("DSA_TEST_SEED")) {
      s = std::strtoull(env, nullptr, 10);
    } else {
      std::random_device rd;
      s = (uint64_t{rd()} << 32) ^ rd();
    }
    std::fprintf(stderr, "[dsa] test seed %llu (set DSA_TEST_SEED to replay)\n",
                 static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

std::vector<float> Rng::normal_vector(size_t n, float stddev) {
  std::vector<float> v(n);
  for (auto& x : v) x = normal(0.f, stddev);
  return v;
}

std::vector<bf16> Rng::bf16_vector(size_t n, float stddev) {
  std::vector<bf16> v(n);
  for (auto& x : v) x = float_to_bf16(normal(0.f, stddev));
  return v;
}

std::vector<uint8_t> Rng::e4m3_vector(size_t n, float stddev) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = float_to_e4m3(normal(0.f, stddev)).bits;
  return v;
}

std::vector<int32_t> Rng::permutation(int32_t lo, int32_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(std::max(hi - lo, 0)));
  std::iota(v.begin(), v.end(), lo);
  std::shuffle(v.begin(), v.end(), gen_);
  return v;
}

}  // namespace dsa::testing
