// Test helpers for dsa/model: a self-deleting temp directory, file writing, a minimal safetensors
// writer (including headers that lie, for the rejection tests) and the config.json of SPEC.md
// §8.1 as JSON, so every fixture is built by the tests themselves.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsa/core/check.h"
#include "dsa/core/tensor.h"

namespace dsa::model::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dsa_model_XXXXXX").string();
    DSA_CHECK(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::filesystem::path write_file(const std::filesystem::path& path,
                                        const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  DSA_CHECK(out.good());
  return path;
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// A file from a header given verbatim and a data section.
inline std::string safetensors_raw(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

struct FakeTensor {
  std::string name;
  std::string dtype;  // safetensors spelling: "BF16", "F32", "F8_E4M3", ...
  Shape shape;
  size_t elem_size = 2;
  char fill = 0;  // every byte of the tensor
};

// A well-formed file: tensors packed back to back in the given order, header padded with spaces
// to a multiple of 8 as the reference writer does.
inline std::string safetensors_bytes(const std::vector<FakeTensor>& tensors,
                                     const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const FakeTensor& t : tensors) {
    const size_t n = static_cast<size_t>(shape_numel(t.shape)) * t.elem_size;
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + n}}};
    data.append(n, t.fill);
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  return safetensors_raw(h, data);
}

// config.json of the tiny model (SPEC.md §8.1, right column).
inline nlohmann::json tiny_config_json() {
  return {
      {"architectures", {"DeepseekV32ForCausalLM"}},
      {"model_type", "deepseek_v32"},
      {"vocab_size", 6144},
      {"hidden_size", 256},
      {"intermediate_size", 768},
      {"moe_intermediate_size", 128},
      {"num_hidden_layers", 4},
      {"num_nextn_predict_layers", 1},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"num_attention_heads", 16},
      {"num_key_value_heads", 16},
      {"q_lora_rank", 128},
      {"kv_lora_rank", 512},
      {"qk_nope_head_dim", 64},
      {"qk_rope_head_dim", 64},
      {"v_head_dim", 64},
      {"n_routed_experts", 4},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 2},
      {"n_group", 2},
      {"topk_group", 1},
      {"topk_method", "noaux_tc"},
      {"scoring_func", "sigmoid"},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"index_n_heads", 16},
      {"index_head_dim", 128},
      {"index_topk", 128},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 10000},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 40},
        {"original_max_position_embeddings", 4096},
        {"beta_fast", 32},
        {"beta_slow", 1},
        {"mscale", 1.0},
        {"mscale_all_dim", 1.0}}},
      {"max_position_embeddings", 163840},
      {"tie_word_embeddings", false},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
      {"torch_dtype", "bfloat16"},  // unknown keys are ignored
  };
}

// config.json of DeepSeek-V3.2 (SPEC.md §8.1, left column), FP8 checkpoint.
inline nlohmann::json v32_config_json() {
  nlohmann::json c = tiny_config_json();
  c.update({{"vocab_size", 129280},
            {"hidden_size", 7168},
            {"intermediate_size", 18432},
            {"moe_intermediate_size", 2048},
            {"num_hidden_layers", 61},
            {"first_k_dense_replace", 3},
            {"num_attention_heads", 128},
            {"num_key_value_heads", 128},
            {"q_lora_rank", 1536},
            {"qk_nope_head_dim", 128},
            {"v_head_dim", 128},
            {"n_routed_experts", 256},
            {"num_experts_per_tok", 8},
            {"n_group", 8},
            {"topk_group", 4},
            {"index_n_heads", 64},
            {"index_topk", 2048},
            {"quantization_config",
             {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"weight_block_size", {128, 128}},
              {"activation_scheme", "dynamic"},
              {"scale_fmt", "ue8m0"}}}});
  return c;
}

// Writes dir/config.json: the shipped tiny model's config with V3.2's quantization_config (FP8
// linears with ue8m0 block scales of 128 x 128), `layers` layers when > 0.
inline void write_tiny_fp8_config(const std::filesystem::path& dir, int64_t layers = 0) {
  std::ifstream in(std::string(DSA_SOURCE_DIR) + "/models/tiny-dsa/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  if (layers > 0) c["num_hidden_layers"] = layers;
  c["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  write_file(dir / "config.json", c.dump());
}

}  // namespace dsa::model::testing
