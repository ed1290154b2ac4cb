// Random inputs for tests and `dsa check`. Every test draws a fresh seed (DSA_TEST_SEED pins it)
// and prints it, so a failure can be replayed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "dsa/core/dtype.h"

namespace dsa::testing {

// The seed for this process: DSA_TEST_SEED if set, else from std::random_device; printed once.
uint64_t test_seed();

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float normal(float mean = 0.f, float stddev = 1.f) {
    return std::normal_distribution<float>(mean, stddev)(gen_);
  }
  // Uniform integer in [lo, hi].
  int64_t randint(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  std::mt19937_64& engine() { return gen_; }

  std::vector<float> normal_vector(size_t n, float stddev = 1.f);
  std::vector<bf16> bf16_vector(size_t n, float stddev = 1.f);
  // Random e4m3 codes of finite values (never NaN).
  std::vector<uint8_t> e4m3_vector(size_t n, float stddev = 1.f);
  // A random permutation of [lo, hi).
  std::vector<int32_t> permutation(int32_t lo, int32_t hi);

 private:
  std::mt19937_64 gen_;
};

}  // namespace dsa::testing
