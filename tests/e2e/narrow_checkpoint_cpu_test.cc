// How far the narrow V3.2 checkpoint's logits move on the CPU alone (the yardstick for the GPU
// test's teacher-forced bounds, narrow_checkpoint_cuda_test.cc): two loads of one checkpoint
// agree bit for bit, and one bf16 ulp of one scale (routed_scaling_factor × (1 + 2^-8), every MoE
// output moved by about one rounding) moves the logits by a measured, printed amount, through every
// layer after the first MoE one. The figures printed are the CPU's own response to one rounding's
// worth of difference, in the GPU test's units (mean |dlogit| over the row's spread).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "dsa/model/model_test_util.h"
#include "tests/e2e/model_compare.h"
#include "tests/e2e/narrow_checkpoint.h"

namespace dsa::e2e {
namespace {

constexpr int32_t kNewTokens = 24;
constexpr const char* kEveryExpert = "--set num_experts_per_tok=4 --set topk_group=2";

// A copy of the checkpoint in `from` with routed_scaling_factor scaled by (1 + 2^-8).
void perturbed_copy(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(to / "config.json"));
  c["routed_scaling_factor"] = c["routed_scaling_factor"].get<double>() * (1.0 + 1.0 / 256.0);
  std::ofstream(to / "config.json") << c.dump(2);
}

// One checkpoint (FP8, or bf16 with quantization_config removed), every expert active: the CPU's
// greedy continuation, then the reference's logits against a second load of the same checkpoint
// (bit for bit) and against the perturbed copy (printed; seen, and far below a wrong model's ~1).
void yardstick(bool fp8) {
  const std::string label = std::string("narrow V3.2 checkpoint, ") + (fp8 ? "FP8" : "bf16");
  model::testing::TempDir tmp;
  const std::string extra =
      std::string(kEveryExpert) + (fp8 ? "" : " --set quantization_config=null");
  const std::string made = make_narrow_checkpoint(DSA_BINARY, tmp / "", extra);
  ASSERT_EQ(made, "");
  perturbed_copy(tmp / "v32", tmp / "v32p");
  const auto prompts = golden_prompt_ids();
  const int32_t n = int32_t(prompts.size());
  auto reference = load_narrow(tmp / "v32", kernels::cpu_ops(), 0, n);
  auto again = load_narrow(tmp / "v32", kernels::cpu_ops(), 0, n);
  auto perturbed = load_narrow(tmp / "v32p", kernels::cpu_ops(), 0, n);
  ASSERT_TRUE(reference && again && perturbed);
  const auto continuation = generate(*reference, prompts, kNewTokens);
  const TeacherForced same =
      compare_teacher_forced(label + ", cpu vs cpu", *reference, *again, prompts, continuation);
  EXPECT_GT(same.rows, 0);
  EXPECT_EQ(same.relative_mean(), 0.0) << label << ": two loads differ";
  EXPECT_EQ(same.agree, same.clear);
  const TeacherForced moved =
      compare_teacher_forced(label + ", cpu vs cpu with routed_scaling_factor x (1 + 2^-8)",
                             *reference, *perturbed, prompts, continuation);
  EXPECT_GT(moved.relative_mean(), 0.0) << label << ": the perturbation did not reach the logits";
  EXPECT_LT(moved.relative_mean(), 0.5) << label;
}

TEST(NarrowCheckpointCpu, Fp8TwoLoadsAgreeAndOneUlpOfTheMoeScaleMovesTheLogits) { yardstick(true); }

TEST(NarrowCheckpointCpu, Bf16TwoLoadsAgreeAndOneUlpOfTheMoeScaleMovesTheLogits) {
  yardstick(false);
}

}  // namespace
}  // namespace dsa::e2e
