// config.json fuzz: every field of the shipped tiny config (and of the V3.2 quantization block)
// replaced by each value of a table - deleted, of the wrong type, 0, -1, huge, 2^31, 2^63, NaN,
// a number beyond double - must load in well under a second and either succeed because the
// value is legal (the table below says which are) or fail with a Status naming the field. Then
// random byte damage to the whole file: never a throw, a crash or a hang.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "dsa/model/fuzz_test_util.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_test_util.h"
#include "dsa/testing/watchdog.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::load_quickly;

// Each replacement as raw JSON text, so values JSON cannot hold (NaN, 1e400) reach the parser.
const std::vector<std::pair<std::string, std::string>> kValues = {
    {"delete", ""},
    {"string", "\"text\""},
    {"null", "null"},
    {"true", "true"},
    {"array", "[1, 2]"},
    {"object", "{\"a\": 1}"},
    {"zero", "0"},
    {"minus_one", "-1"},
    {"half", "0.5"},
    {"four_float", "4.0"},
    {"1e12_int", "1000000000000"},
    {"2^31", "2147483648"},
    {"2^63-1", "9223372036854775807"},
    {"2^63", "9223372036854775808"},
    {"2^64", "18446744073709551616"},
    {"1e308", "1e308"},
    {"1e-40", "1e-40"},
    {"minus_zero", "-0.0"},
    {"1e400", "1e400"},
    {"NaN", "NaN"},
    {"minus_inf", "-Infinity"},
};

const std::set<std::string> kNotJson = {"1e400", "NaN", "minus_inf"};
const std::set<std::string> kBigFinite = {"four_float", "1e12_int", "2^31", "2^63-1",
                                          "2^63",       "2^64",     "1e308"};

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

// Keys the loader ignores: any value that is JSON is fine, and so is their absence.
const std::set<std::string> kIgnored = {"hidden_act", "attention_bias", "attention_dropout",
                                        "initializer_range", "torch_dtype"};

// The (field, value) pairs that are legal; every other one must be refused.
const std::map<std::string, std::set<std::string>>& legal_values() {
  static const std::map<std::string, std::set<std::string>> legal = {
      {"first_k_dense_replace", {"zero"}},
      {"num_nextn_predict_layers", {"zero"}},
      {"n_shared_experts", {"zero"}},
      {"bos_token_id", {"zero"}},
      {"eos_token_id", {"zero", "array"}},  // [1, 2]: a list of ids, as GLM-5 writes it
      {"norm_topk_prob", {"true"}},
      {"rms_norm_eps", {"half"}},
      {"rope_theta", kBigFinite},
      {"routed_scaling_factor", with({"half", "1e-40"}, kBigFinite)},
      {"routed_scaling_factor", with({"half", "1e-40"}, kBigFinite)},
      {"rope_scaling.type", {"delete"}},  // rope_type says yarn as well
      {"rope_scaling.rope_type", {"delete"}},
      {"rope_scaling.factor", kBigFinite},
      {"rope_scaling.beta_fast", kBigFinite},
      {"rope_scaling.beta_slow", {"half", "four_float", "1e-40"}},
      {"quantization_config.scale_fmt", {"delete"}},
      {"quantization_config", {"delete"}},
      {"indexer_rope_interleave", {"delete", "true"}},
  };
  return legal;
}

// 1e308 is finite but not an fp32.
bool is_legal(const std::string& field, const std::string& value) {
  if (kIgnored.count(field)) return kNotJson.count(value) == 0;
  if (field == "routed_scaling_factor" && value == "1e308") return false;
  auto it = legal_values().find(field);
  return it != legal_values().end() && it->second.count(value) != 0;
}

// `base` with `field` ("a" or "a.b") replaced by the raw text `raw`, or deleted.
std::string with_value(json base, const std::string& field, const std::string& raw) {
  const size_t dot = field.find('.');
  json& parent = dot == std::string::npos ? base : base[field.substr(0, dot)];
  const std::string key = dot == std::string::npos ? field : field.substr(dot + 1);
  if (raw.empty()) {
    parent.erase(key);
    return base.dump(2);
  }
  const std::string marker = "@@fuzz-value@@";
  parent[key] = marker;
  std::string text = base.dump(2);
  text.replace(text.find("\"" + marker + "\""), marker.size() + 2, raw);
  return text;
}

// The fields of `base`, nested objects' keys as "parent.key", plus the objects themselves.
std::vector<std::string> fields_of(const json& base) {
  std::vector<std::string> out;
  for (const auto& [k, v] : base.items()) {
    out.push_back(k);
    if (v.is_object()) {
      for (const auto& [k2, v2] : v.items()) out.push_back(k + "." + k2);
    }
  }
  return out;
}

// Loads every (field, value) of `base` and checks the outcome; returns how many loads ran.
int fuzz_fields(const json& base, const std::vector<std::string>& fields) {
  int loads = 0;
  for (const std::string& field : fields) {
    for (const auto& [name, raw] : kValues) {
      const std::string what = field + " = " + name;
      const std::string text = with_value(base, field, raw);
      Status s = load_quickly(what, [&] { return parse_model_config(text, "config.json"); });
      ++loads;
      const bool legal = is_legal(field, name);
      if (legal) {
        EXPECT_TRUE(s.ok()) << what << " is legal but: " << s.to_string();
        continue;
      }
      if (s.ok()) {
        ADD_FAILURE() << what << ": loaded, but the value is not legal";
        continue;
      }
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
      EXPECT_EQ(s.message().rfind("config.json: ", 0), 0u) << what << ": " << s.message();
      // The message names the field: its full name, or its own key (a parse error points at
      // the key nearest the error, which is the leaf).
      const std::string leaf = field.substr(field.find('.') + 1);
      EXPECT_NE(s.message().find(leaf), std::string::npos) << what << ": " << s.message();
    }
  }
  return loads;
}

json shipped_config() {
  return json::parse(testing::read_bytes(testing::repo_path("models/tiny-dsa/config.json")));
}

TEST(ConfigFuzz, ShippedConfigLoads) {
  ASSERT_TRUE(parse_model_config(shipped_config().dump(), "config.json").ok());
}

TEST(ConfigFuzz, EveryFieldOfTheTinyConfig) {
  dsa::testing::within_seconds(60, [] {
    const json base = shipped_config();
    const int loads = fuzz_fields(base, fields_of(base));
    EXPECT_GT(loads, 40 * static_cast<int>(kValues.size()));
  });
}

TEST(ConfigFuzz, QuantizationAndOptionalFieldsOfV32) {
  json v32 = testing::v32_config_json();
  v32["indexer_rope_interleave"] = false;
  std::vector<std::string> fields = {"quantization_config", "indexer_rope_interleave"};
  for (const auto& [k, v] : v32["quantization_config"].items()) {
    fields.push_back("quantization_config." + k);
  }
  dsa::testing::within_seconds(30, [&] { fuzz_fields(v32, fields); });
}

// Seeded byte damage anywhere in the file (DSA_TEST_SEED replays a failure).
TEST(ConfigFuzz, RandomByteDamage) {
  const std::string text = testing::read_bytes(testing::repo_path("models/tiny-dsa/config.json"));
  dsa::testing::Rng rng(dsa::testing::test_seed());
  dsa::testing::within_seconds(60, [&] {
    int loaded = 0;
    for (int i = 0; i < 2000; ++i) {
      std::string what;
      const std::string damaged = testing::mutate_bytes(text, rng, 0, &what);
      Status s = load_quickly(what, [&] { return parse_model_config(damaged, "config.json"); });
      if (s.ok()) {
        ++loaded;
        continue;
      }
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.to_string();
      EXPECT_EQ(s.message().rfind("config.json: ", 0), 0u) << what << ": " << s.message();
    }
    // Most damage is refused; a little lands in ignored keys or whitespace.
    EXPECT_LT(loaded, 1000);
  });
}

}  // namespace
}  // namespace dsa::model
