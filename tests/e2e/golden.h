// Reads testdata/tiny-dsa/golden.json (written by tools/golden.py from the PyTorch reference).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsa::e2e {

struct GoldenMtp {
  std::vector<int32_t> rows;
  int32_t pending_token = 0;
  std::vector<float> logits;  // [rows, vocab]
};

struct GoldenPrompt {
  std::string text;
  std::vector<int32_t> ids;             // BOS first
  std::vector<int32_t> last_positions;  // rows whose logits are stored
  std::vector<float> logits;            // [last_positions, vocab]
  std::vector<int32_t> greedy;          // greedy continuation
  std::vector<double> greedy_gaps;      // the reference's top-2 gap at each greedy step
  GoldenMtp mtp;
};

struct Golden {
  std::vector<GoldenPrompt> prompts;
  double ppl_sparse = 0, ppl_dense = 0, mtp_top1 = 0;
  int64_t heldout_tokens = 0;
};

Golden load_golden(const std::string& path);

// (argmax, top-1 minus top-2 logit) of one row of V logits; ties -> the lowest id.
std::pair<int32_t, double> argmax_gap(const float* row, int32_t V);
std::string source_dir();  // the repository root (compile-time)

}  // namespace dsa::e2e
