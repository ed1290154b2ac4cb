#include "dsa/cli/make_checkpoint_command.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dsa/cli/engine_args.h"
#include "dsa/core/dtype.h"
#include "dsa/core/splitmix64.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_tensors.h"
#include "dsa/model/safetensors.h"

namespace dsa::cli {

namespace {

namespace fs = std::filesystem;
using model::ExpectedTensor;
using model::TensorKind;
using nlohmann::json;

struct MakeArgs {
  std::string config, out, tokenizer_from;
  int64_t num_hidden_layers = 0, n_routed_experts = 0, hidden_size = 0;  // 0 = keep
  std::vector<std::string> sets;
  int64_t shards = 1;
  int64_t seed = 0;
  bool fp8 = false;
  double max_gb = 64;
};

constexpr int64_t kBlock = 128;  // FP8 scale block (SPEC.md §8.2)
constexpr float kE4m3Max = 448.0f;

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

StatusOr<json> read_json(const fs::path& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in || fs::is_directory(path)) {
    return not_found(fmt::format("{} {}: cannot open", flag, path.string()));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument(fmt::format("{} {}: not a JSON object", flag, path.string()));
  }
  return j;
}

// The config with the flags applied: named overrides, then --set in order, then --fp8.
StatusOr<json> apply_overrides(json c, const MakeArgs& a) {
  if (a.num_hidden_layers > 0) c["num_hidden_layers"] = a.num_hidden_layers;
  if (a.n_routed_experts > 0) c["n_routed_experts"] = a.n_routed_experts;
  if (a.hidden_size > 0) c["hidden_size"] = a.hidden_size;
  for (const std::string& kv : a.sets) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument(fmt::format("--set {}: must be KEY=VALUE", kv));
    }
    const std::string key = kv.substr(0, eq), text = kv.substr(eq + 1);
    json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) v = text;  // a bare word is a string
    if (v.is_null()) {
      c.erase(key);
    } else {
      c[key] = v;
    }
  }
  if (a.fp8) {
    c["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {128, 128}}};
  }
  return c;
}

// One stored tensor: name, dtype, shape, and how to fill it.
struct Planned {
  std::string name;
  DType dtype;
  Shape shape;
  const ExpectedTensor* source;  // the inventory entry (the weight, for a scale)
  bool is_scale = false;
  uint64_t nbytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }
};

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

// The bytes of one weight (and, for FP8, its scale right after it).
std::string tensor_bytes(const Planned& p, uint64_t seed, bool pow2) {
  const ExpectedTensor& x = *p.source;
  std::string out;
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

// A weight and its scale stay in one shard, as upstream writes them.
struct Unit {
  std::vector<Planned> tensors;
  uint64_t nbytes = 0;
};

StatusOr<std::vector<Unit>> plan(const model::ModelConfig& c,
                                 const std::vector<ExpectedTensor>& inventory) {
  const bool fp8 = c.quantization_config.has_value();
  std::vector<Unit> units;
  for (const ExpectedTensor& x : inventory) {
    if (x.optional) continue;  // the MTP layer shares the target's embed_tokens / lm_head
    Unit u;
    switch (x.kind) {
      case TensorKind::kLinear:
        if (fp8) {
          u.tensors.push_back({x.name, DType::kE4M3, x.shape, &x});
          u.tensors.push_back(
              {model::scale_inv_name(x.name),
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
    for (const Planned& p : u.tensors) u.nbytes += p.nbytes();
    units.push_back(std::move(u));
  }
  return units;
}

// Shard of every unit: about total / K bytes each, none empty.
std::vector<size_t> assign_shards(const std::vector<Unit>& units, size_t k) {
  uint64_t total = 0;
  for (const Unit& u : units) total += u.nbytes;
  std::vector<size_t> shard(units.size());
  size_t s = 0;
  uint64_t cum = 0, in_shard = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const size_t left = units.size() - i, shards_after = k - 1 - s;
    const bool full = double(cum) >= double(total) * double(s + 1) / double(k);
    if (in_shard > 0 && shards_after > 0 && (full || left <= shards_after)) {
      ++s;
      in_shard = 0;
    }
    shard[i] = s;
    cum += units[i].nbytes;
    in_shard += units[i].nbytes;
  }
  return shard;
}

Status write_shard(const fs::path& path, const std::vector<const Planned*>& tensors, uint64_t seed,
                   bool pow2) {
  json header = json::object();
  uint64_t off = 0;
  for (const Planned* p : tensors) {
    header[p->name] = {{"dtype", std::string(model::safetensors_dtype_name(p->dtype))},
                       {"shape", p->shape},
                       {"data_offsets", {off, off + p->nbytes()}}};
    off += p->nbytes();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return internal_error(fmt::format("{}: cannot create", path.string()));
  uint64_t len = h.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(h.data(), std::streamsize(h.size()));
  for (const Planned* p : tensors) {
    if (p->is_scale) continue;  // written with its weight, which directly precedes it
    const std::string bytes = tensor_bytes(*p, seed, pow2);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  out.close();
  if (!out) return internal_error(fmt::format("{}: write failed", path.string()));
  return ok_status();
}

Status copy_tokenizer(const fs::path& from, const fs::path& to) {
  if (!fs::exists(from / "tokenizer.json")) {
    return not_found(fmt::format("--tokenizer-from {}: no tokenizer.json there", from.string()));
  }
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!fs::exists(from / f)) continue;
    std::error_code ec;
    fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return internal_error(
          fmt::format("--tokenizer-from {}: copying {}: {}", from.string(), f, ec.message()));
    }
  }
  return ok_status();
}

Status run(const MakeArgs& a) {
  DSA_RETURN_IF_ERROR(check_range("--shards", a.shards, 1, 99999));
  DSA_RETURN_IF_ERROR(check_range("--seed", a.seed, 0, INT64_MAX));
  if (!(a.max_gb > 0 && a.max_gb <= 1e6)) {
    return invalid_argument(fmt::format("--max-gb = {}: must be in (0, 1e6]", a.max_gb));
  }
  DSA_ASSIGN_OR_RETURN(json cfg, read_json(a.config, "--config"));
  DSA_ASSIGN_OR_RETURN(cfg, apply_overrides(std::move(cfg), a));
  const fs::path out = a.out;
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    return invalid_argument(fmt::format("--out {}: exists and is not an empty directory", a.out));
  }
  fs::create_directories(out, ec);
  if (ec) return internal_error(fmt::format("--out {}: cannot create: {}", a.out, ec.message()));
  {
    std::ofstream f(out / "config.json", std::ios::trunc);
    f << cfg.dump(2) << "\n";
    if (!f) return internal_error(fmt::format("--out {}: cannot write config.json", a.out));
  }
  // The config as dsa reads it: a bad override is refused here, naming the field.
  StatusOr<model::ModelConfig> config = model::load_model_config(out / "config.json");
  if (!config.ok()) {
    fs::remove(out / "config.json", ec);
    if (fs::is_empty(out, ec)) fs::remove(out, ec);
    return Status(config.status().code(),
                  "the config with the overrides applied: " + config.status().message());
  }
  const std::vector<ExpectedTensor> inventory = model::expected_model_tensors(*config);
  DSA_ASSIGN_OR_RETURN(std::vector<Unit> units, plan(*config, inventory));
  uint64_t planned = 0;
  for (const Unit& u : units) planned += u.nbytes;
  if (double(planned) > a.max_gb * 1e9) {
    fs::remove(out / "config.json", ec);
    if (fs::is_empty(out, ec)) fs::remove(out, ec);
    return invalid_argument(fmt::format(
        "this config's weights are {:.1f} GB, more than --max-gb = {}: narrow it (--hidden-size, "
        "--num-hidden-layers, --n-routed-experts, --set) or raise --max-gb",
        double(planned) / 1e9, a.max_gb));
  }
  if (size_t(a.shards) > units.size()) {
    fs::remove(out / "config.json", ec);
    if (fs::is_empty(out, ec)) fs::remove(out, ec);
    return invalid_argument(fmt::format("--shards = {}: more than the {} weights of this config",
                                        a.shards, units.size()));
  }
  const bool pow2 =
      config->quantization_config && config->quantization_config->scale_fmt == "ue8m0";
  const size_t k = size_t(a.shards);
  const std::vector<size_t> shard = assign_shards(units, k);
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t s = 0; s < k; ++s) {
    const std::string name = fmt::format("model-{:05d}-of-{:06d}.safetensors", s + 1, k);
    std::vector<const Planned*> ts;
    for (size_t i = 0; i < units.size(); ++i) {
      if (shard[i] != s) continue;
      for (const Planned& p : units[i].tensors) {
        ts.push_back(&p);
        weight_map[p.name] = name;
        total += p.nbytes();
      }
    }
    DSA_RETURN_IF_ERROR(write_shard(out / name, ts, uint64_t(a.seed), pow2));
  }
  {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream f(out / model::kSafetensorsIndexName, std::ios::trunc);
    f << index.dump(2) << "\n";
    if (!f) return internal_error(fmt::format("--out {}: cannot write the index", a.out));
  }
  if (!a.tokenizer_from.empty()) DSA_RETURN_IF_ERROR(copy_tokenizer(a.tokenizer_from, out));
  fmt::print(
      "dsa make-checkpoint: wrote {}: {} tensors in {} shards, {:.1f} MB ({})\n", a.out,
      weight_map.size(), k, double(total) / 1e6,
      config->quantization_config ? "FP8 e4m3 linears with 128x128 weight_scale_inv" : "bf16");
  return ok_status();
}

}  // namespace

void add_make_checkpoint_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<MakeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make-checkpoint",
      "Write a random checkpoint in DeepSeek-V3.2's sharded layout (config.json, shards, index)");
  cmd->add_option("--config", a->config, "config.json to start from")->required();
  cmd->add_option("--out", a->out, "Output directory (created; must be empty)")->required();
  cmd->add_option("--num-hidden-layers", a->num_hidden_layers, "Override num_hidden_layers");
  cmd->add_option("--n-routed-experts", a->n_routed_experts, "Override n_routed_experts");
  cmd->add_option("--hidden-size", a->hidden_size, "Override hidden_size");
  cmd->add_option("--set", a->sets,
                  "Override any field: KEY=JSON (repeatable; a bare word is a string, null "
                  "removes the field)");
  cmd->add_option("--shards", a->shards, "Number of safetensors shards")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_option("--max-gb", a->max_gb, "Refuse to write more than this many GB of weights")
      ->capture_default_str();
  cmd->add_flag("--fp8", a->fp8,
                "Add V3.2's quantization_config (FP8 e4m3 linears, 128x128 ue8m0 scales)");
  cmd->add_option("--tokenizer-from", a->tokenizer_from,
                  "Copy tokenizer.json (and tokenizer_config.json) from this directory");
  for (const char* name :
       {"--num-hidden-layers", "--n-routed-experts", "--hidden-size", "--shards", "--seed"}) {
    cmd->get_option(name)->check(int64_range());
  }
  cmd->callback([a, exit_code] {
    Status s = run(*a);
    if (!s.ok()) {
      fmt::print(stderr, "dsa make-checkpoint: {}\n", s.to_string());
      *exit_code = 1;
    }
  });
}

}  // namespace dsa::cli
