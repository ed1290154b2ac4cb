// Helpers of the loader fuzz tests (config.json, tokenizer.json, safetensors headers): the
// shipped files as bytes, seeded byte-level mutations of them, and the check every load must
// pass whatever it is fed - it returns, quickly, without throwing.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "dsa/core/check.h"
#include "dsa/core/status.h"
#include "dsa/testing/random.h"

namespace dsa::model::testing {

inline std::string repo_path(const std::string& path) {
  return std::string(DSA_SOURCE_DIR) + "/" + path;
}

inline std::string read_bytes(const std::string& path, size_t max_bytes = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  DSA_CHECK(in.good());
  std::string s(max_bytes == SIZE_MAX ? 0 : max_bytes, '\0');
  if (max_bytes == SIZE_MAX) {
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  in.read(s.data(), static_cast<std::streamsize>(max_bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// One random damage to `bytes` at or after `from`, described in `what` (for the failure message
// and a replay with DSA_TEST_SEED): flipped bits, a byte set to a character JSON cares about, a
// deleted or duplicated span, or a truncation.
inline std::string mutate_bytes(const std::string& bytes, dsa::testing::Rng& rng, size_t from,
                                std::string* what) {
  static const std::string kJsonChars = "{}[]\":,-+.0123456789eE\\ntfu \n\xff\xc3";
  std::string s = bytes;
  if (s.size() <= from) return s;
  const auto pos = [&] { return static_cast<size_t>(rng.randint(from, s.size() - 1)); };
  const int64_t kind = rng.randint(0, 4);
  const size_t p = pos();
  switch (kind) {
    case 0: {
      const int64_t n = rng.randint(1, 8);
      *what = "flip " + std::to_string(n) + " bits from " + std::to_string(p);
      for (int64_t i = 0; i < n; ++i) s[pos()] ^= static_cast<char>(1 << rng.randint(0, 7));
      break;
    }
    case 1:
      s[p] = kJsonChars[rng.randint(0, kJsonChars.size() - 1)];
      *what = "set byte " + std::to_string(p) + " to " + std::to_string(uint8_t(s[p]));
      break;
    case 2: {
      const size_t n = static_cast<size_t>(rng.randint(1, 64));
      s.erase(p, n);
      *what = "erase " + std::to_string(n) + " bytes at " + std::to_string(p);
      break;
    }
    case 3: {
      const size_t n = static_cast<size_t>(rng.randint(1, 64));
      s.insert(p, s.substr(p, n));
      *what = "duplicate " + std::to_string(n) + " bytes at " + std::to_string(p);
      break;
    }
    default:
      s.resize(p);
      *what = "truncate to " + std::to_string(p) + " bytes";
      break;
  }
  return s;
}

// Runs `load` (returning a Status or StatusOr) and checks it neither throws nor takes more than
// `seconds`; returns its status.
template <class F>
Status load_quickly(const std::string& what, F&& load, double seconds = 2.0) {
  const auto start = std::chrono::steady_clock::now();
  Status status;
  try {
    auto result = load();
    if constexpr (std::is_same_v<decltype(result), Status>) {
      status = result;
    } else {
      status = result.status();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw " << e.what();
    return internal_error("threw");
  } catch (...) {
    ADD_FAILURE() << what << ": threw a non-std exception";
    return internal_error("threw");
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, seconds) << what << " took " << took << " s";
  return status;
}

}  // namespace dsa::model::testing
