// Shared setup for the engine tests: the shipped tiny model, prompts from the held-out text.
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dsa/engine/engine.h"
#include "dsa/model/tokenizer.h"

namespace dsa::engine::testing {

inline std::string repo(const std::string& rel) { return std::string(DSA_SOURCE_DIR) + "/" + rel; }

// The tiny model's options in the engine tests: 512-token contexts and EXTEND forwards.
inline model::ModelOptions tiny_options(int32_t d, int32_t max_requests = 4,
                                        std::vector<int32_t> buckets = {}) {
  model::ModelOptions o;
  o.buckets = std::move(buckets);
  o.max_context = 512;
  o.num_draft_tokens = d;
  o.max_requests = max_requests;
  o.max_extend_rows = 512;
  return o;
}

inline std::unique_ptr<model::DsaModel> tiny_model(int32_t d, int32_t max_requests = 4,
                                                   int32_t num_pages = 0,
                                                   std::vector<int32_t> buckets = {}) {
  model::ModelOptions o = tiny_options(d, max_requests, std::move(buckets));
  o.num_pages = num_pages;
  auto m = model::DsaModel::load(repo("models/tiny-dsa"), o, kernels::cpu_ops());
  DSA_CHECK(m.ok());
  return std::move(*m);
}

inline const model::Tokenizer& tokenizer() {
  static const model::Tokenizer t = [] {
    auto tok = model::Tokenizer::load(repo("models/tiny-dsa/tokenizer.json"));
    DSA_CHECK(tok.ok());
    DSA_CHECK(tok->set_special_ids(0, 1).ok());
    return std::move(*tok);
  }();
  return t;
}

// `count` prompts of the given token lengths, cut from the held-out text's documents.
inline std::vector<std::vector<int32_t>> heldout_prompts(const std::vector<int32_t>& lengths) {
  std::ifstream f(repo("testdata/heldout.txt"));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::vector<std::vector<int32_t>> out;
  size_t begin = 0;
  for (int32_t len : lengths) {
    size_t end = text.find("\n\n", begin);
    std::vector<int32_t> ids =
        tokenizer().encode(text.substr(begin, end - begin), /*add_bos=*/true);
    ids.resize(std::min(ids.size(), size_t(len)));
    out.push_back(ids);
    begin = end + 2;
  }
  return out;
}

struct RunResult {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<std::vector<int32_t>> accept_lengths;
  EngineMetrics metrics;
};

inline RunResult generate(model::DsaModel& m, const std::vector<std::vector<int32_t>>& prompts,
                          const std::vector<int32_t>& max_new, SamplingParams sampling = {},
                          EngineOptions options = {}) {
  Engine e(m, options);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r{prompts[i], max_new[i], sampling};
    r.sampling.seed = sampling.seed + i;
    auto id = e.add_request(r);
    DSA_CHECK(id.ok());
    ids.push_back(*id);
  }
  Status s = e.run_to_completion();
  DSA_CHECK(s.ok());
  RunResult res;
  for (int64_t id : ids) {
    res.outputs.push_back(e.request(id).output);
    res.accept_lengths.push_back(e.request(id).accept_lengths);
  }
  res.metrics = e.metrics();
  return res;
}

}  // namespace dsa::engine::testing
