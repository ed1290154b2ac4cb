#include "dsa/model/random_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "dsa/core/splitmix64.h"
#include "dsa/model/safetensors.h"

namespace dsa::model {

namespace {

constexpr int64_t kBlock = 128;  // FP8 scale block (SPEC.md §8.2)

// A fixed, portable stream per (seed, tensor).
struct Rng {
  SplitMix64 bits;
  // Uniform in [-a, a).
  float uniform(float a) { return a * (float((bits.next() >> 40) * 0x1p-24) * 2.0f - 1.0f); }
};

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Standard-deviation-preserving amplitude for a [out, in] matrix: uniform(+-sqrt(3 / in)).
float amplitude(const ExpectedTensor& x) {
  if (x.name == "model.embed_tokens.weight" || ends_with(x.name, ".embed_tokens.weight")) {
    return 1.0f;
  }
  return std::sqrt(3.0f / float(x.shape[1]));
}

// The weight's values as float (before any quantisation).
std::vector<float> random_matrix(const ExpectedTensor& x, uint64_t seed) {
  Rng rng{seed ^ name_hash(x.name)};
  const float a = amplitude(x);
  std::vector<float> v(size_t(shape_numel(x.shape)));
  for (float& f : v) f = rng.uniform(a);
  return v;
}

// FP8 quantisation with one scale per 128x128 block; `pow2` rounds scales up to powers of two
// (scale_fmt ue8m0).
void quantize(const std::vector<float>& w, int64_t out, int64_t in, bool pow2,
              std::vector<uint8_t>* q, std::vector<float>* scale_inv) {
  const int64_t rb = (out + kBlock - 1) / kBlock, cb = (in + kBlock - 1) / kBlock;
  q->assign(w.size(), 0);
  scale_inv->assign(size_t(rb * cb), 1.0f);
  for (int64_t bi = 0; bi < rb; ++bi) {
    for (int64_t bj = 0; bj < cb; ++bj) {
      const int64_t i1 = std::min(out, (bi + 1) * kBlock), j1 = std::min(in, (bj + 1) * kBlock);
      float amax = 0;
      for (int64_t i = bi * kBlock; i < i1; ++i) {
        for (int64_t j = bj * kBlock; j < j1; ++j)
          amax = std::max(amax, std::fabs(w[size_t(i * in + j)]));
      }
      float s = amax > 0 ? amax / kE4m3Max : 1.0f;
      if (pow2) s = std::exp2(std::ceil(std::log2(s)));
      (*scale_inv)[size_t(bi * cb + bj)] = s;
      for (int64_t i = bi * kBlock; i < i1; ++i) {
        for (int64_t j = bj * kBlock; j < j1; ++j) {
          (*q)[size_t(i * in + j)] = float_to_e4m3(w[size_t(i * in + j)] / s).bits;
        }
      }
    }
  }
}

template <typename T>
void append(std::string* out, const std::vector<T>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

bool random_scales_pow2(const ModelConfig& c) {
  return c.quantization_config && c.quantization_config->scale_fmt == "ue8m0";
}

std::vector<RandomUnit> plan_random_tensors(const ModelConfig& c,
                                            const std::vector<ExpectedTensor>& inventory) {
  const bool fp8 = c.quantization_config.has_value();
  std::vector<RandomUnit> units;
  for (const ExpectedTensor& x : inventory) {
    if (x.optional) continue;  // the MTP layer shares the target's embed_tokens / lm_head
    RandomUnit u;
    switch (x.kind) {
      case TensorKind::kLinear:
        if (fp8) {
          u.tensors.push_back({x.name, DType::kE4M3, x.shape, &x});
          u.tensors.push_back(
              {scale_inv_name(x.name),
               DType::kF32,
               {(x.shape[0] + kBlock - 1) / kBlock, (x.shape[1] + kBlock - 1) / kBlock},
               &x,
               true});
        } else {
          u.tensors.push_back({x.name, DType::kBF16, x.shape, &x});
        }
        break;
      case TensorKind::kMatrix:
      case TensorKind::kVector:
        u.tensors.push_back({x.name, DType::kBF16, x.shape, &x});
        break;
      case TensorKind::kF32:
        u.tensors.push_back({x.name, DType::kF32, x.shape, &x});
        break;
    }
    for (const RandomTensor& p : u.tensors) u.nbytes += p.nbytes();
    units.push_back(std::move(u));
  }
  return units;
}

std::string random_tensor_bytes(const RandomTensor& p, uint64_t seed, bool pow2) {
  std::string out;
  if (p.is_scale) return out;
  const ExpectedTensor& x = *p.source;
  const size_t n = size_t(shape_numel(x.shape));
  switch (x.kind) {
    case TensorKind::kVector: {
      // Norm weights 1, the indexer's k_norm bias 0 (the initial values of the HF model).
      const bool bias = ends_with(x.name, ".bias");
      append(&out, std::vector<bf16>(n, float_to_bf16(bias ? 0.0f : 1.0f)));
      return out;
    }
    case TensorKind::kF32:
      append(&out, std::vector<float>(n, 0.0f));  // e_score_correction_bias
      return out;
    case TensorKind::kMatrix:
    case TensorKind::kLinear:
      break;
  }
  std::vector<float> w = random_matrix(x, seed);
  if (p.dtype == DType::kE4M3) {
    std::vector<uint8_t> q;
    std::vector<float> s;
    quantize(w, x.shape[0], x.shape[1], pow2, &q, &s);
    append(&out, q);
    append(&out, s);
    return out;
  }
  std::vector<bf16> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = float_to_bf16(w[i]);
  append(&out, b);
  return out;
}

std::string safetensors_header_for(const std::vector<const RandomTensor*>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (const RandomTensor* p : tensors) {
    header[p->name] = {{"dtype", std::string(safetensors_dtype_name(p->dtype))},
                       {"shape", p->shape},
                       {"data_offsets", {off, off + p->nbytes()}}};
    off += p->nbytes();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

uint64_t random_weight_bytes(const ModelConfig& config) {
  const std::vector<ExpectedTensor> inventory = expected_model_tensors(config);
  uint64_t total = 0;
  for (const RandomUnit& u : plan_random_tensors(config, inventory)) total += u.nbytes;
  return total;
}

StatusOr<Checkpoint> random_checkpoint(const ModelConfig& config, uint64_t seed) {
  const std::vector<ExpectedTensor> inventory = expected_model_tensors(config);
  const std::vector<RandomUnit> units = plan_random_tensors(config, inventory);
  std::vector<const RandomTensor*> all;
  uint64_t data = 0;
  for (const RandomUnit& u : units) {
    for (const RandomTensor& t : u.tensors) all.push_back(&t);
    data += u.nbytes;
  }
  const std::string header = safetensors_header_for(all);
  const bool pow2 = random_scales_pow2(config);
  const size_t size = 8 + header.size() + size_t(data);
  DSA_ASSIGN_OR_RETURN(
      SafetensorsFile f,
      SafetensorsFile::from_image(fmt::format("random weights (seed {})", seed), size,
                                  [&](unsigned char* out) {
                                    const uint64_t len = header.size();
                                    for (int i = 0; i < 8; ++i)
                                      out[i] = static_cast<unsigned char>(len >> (8 * i));
                                    std::memcpy(out + 8, header.data(), header.size());
                                    unsigned char* p = out + 8 + header.size();
                                    for (const RandomTensor* t : all) {
                                      const std::string bytes = random_tensor_bytes(*t, seed, pow2);
                                      std::memcpy(p, bytes.data(), bytes.size());
                                      p += bytes.size();
                                    }
                                  }));
  return Checkpoint::of_file(std::move(f));
}

}  // namespace dsa::model
