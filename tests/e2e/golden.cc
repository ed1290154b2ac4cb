#include "tests/e2e/golden.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace dsa::e2e {

namespace {

std::vector<float> decode_base64_f32(const std::string& s) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  uint32_t buf = 0;
  int bits = 0;
  for (char ch : s) {
    if (ch == '=') break;
    size_t v = kAlphabet.find(ch);
    if (v == std::string::npos) continue;
    buf = (buf << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(uint8_t((buf >> bits) & 0xFF));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace

std::string source_dir() { return DSA_SOURCE_DIR; }

Golden load_golden(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  nlohmann::json j = nlohmann::json::parse(f);
  Golden g;
  for (const auto& p : j.at("prompts")) {
    GoldenPrompt q;
    q.text = p.at("text").get<std::string>();
    q.ids = p.at("ids").get<std::vector<int32_t>>();
    q.last_positions = p.at("last_positions").get<std::vector<int32_t>>();
    q.logits = decode_base64_f32(p.at("logits_f32_b64").get<std::string>());
    q.greedy = p.at("greedy").get<std::vector<int32_t>>();
    q.greedy_gaps = p.at("greedy_top2_gaps").get<std::vector<double>>();
    const auto& m = p.at("mtp");
    q.mtp.rows = m.at("rows").get<std::vector<int32_t>>();
    q.mtp.pending_token = m.at("pending_token").get<int32_t>();
    q.mtp.logits = decode_base64_f32(m.at("logits_f32_b64").get<std::string>());
    g.prompts.push_back(std::move(q));
  }
  const auto& h = j.at("heldout");
  g.ppl_sparse = h.at("ppl_sparse").get<double>();
  g.ppl_dense = h.at("ppl_dense").get<double>();
  g.mtp_top1 = h.at("mtp_teacher_forced_top1").get<double>();
  g.heldout_tokens = h.at("tokens").get<int64_t>();
  return g;
}

std::pair<int32_t, double> argmax_gap(const float* row, int32_t V) {
  int32_t best = 0;
  for (int32_t v = 1; v < V; ++v)
    if (row[v] > row[best]) best = v;
  float second = -INFINITY;
  for (int32_t v = 0; v < V; ++v)
    if (v != best) second = std::max(second, row[v]);
  return {best, double(row[best]) - double(second)};
}

}  // namespace dsa::e2e
