#include "dsa/cli/make_checkpoint_command.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dsa/cli/engine_args.h"
#include "dsa/core/dtype.h"
#include "dsa/core/thread_pool.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_tensors.h"
#include "dsa/model/random_tensors.h"
#include "dsa/model/safetensors.h"

namespace dsa::cli {

namespace {

namespace fs = std::filesystem;
using model::ExpectedTensor;
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

using Planned = model::RandomTensor;
using Unit = model::RandomUnit;

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
  const std::string h = model::safetensors_header_for(tensors);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return internal_error(fmt::format("{}: cannot create", path.string()));
  uint64_t len = h.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(h.data(), std::streamsize(h.size()));
  for (const Planned* p : tensors) {
    if (p->is_scale) continue;  // written with its weight, which directly precedes it
    const std::string bytes = model::random_tensor_bytes(*p, seed, pow2);
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
  const std::vector<Unit> units = model::plan_random_tensors(*config, inventory);
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
  const bool pow2 = model::random_scales_pow2(*config);
  const size_t k = size_t(a.shards);
  const std::vector<size_t> shard = assign_shards(units, k);
  json weight_map = json::object();
  uint64_t total = 0;
  std::vector<std::string> names(k);
  std::vector<std::vector<const Planned*>> shard_tensors(k);
  for (size_t s = 0; s < k; ++s) {
    names[s] = fmt::format("model-{:05d}-of-{:06d}.safetensors", s + 1, k);
    for (size_t i = 0; i < units.size(); ++i) {
      if (shard[i] != s) continue;
      for (const Planned& p : units[i].tensors) {
        shard_tensors[s].push_back(&p);
        weight_map[p.name] = names[s];
        total += p.nbytes();
      }
    }
  }
  // Shards are written in parallel: each tensor's bytes depend only on (seed, name), so the
  // files do not depend on the thread count, and a full-width checkpoint (tens of GB of random
  // weights to quantise) takes minutes on one core.
  std::vector<Status> written(k);
  parallel_for(int64_t(k), [&](int64_t s) {
    written[size_t(s)] =
        write_shard(out / names[size_t(s)], shard_tensors[size_t(s)], uint64_t(a.seed), pow2);
  });
  for (const Status& st : written) DSA_RETURN_IF_ERROR(st);
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
