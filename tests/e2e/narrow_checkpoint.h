// The narrow checkpoint in DeepSeek-V3.2's real layout that the whole-model tests share (issue 16):
// `dsa make-checkpoint` writes it from testdata/deepseek-v3.2/config.json with
// tests/cli/v32_narrow_lib.sh's overrides (widths and layer count cut, the layout kept: FP8 e4m3
// linears with 128 x 128 weight_scale_inv, MoE with group routing, the MTP layer, several shards
// and an index), and the teacher-forced comparison of two models' logits over it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dsa/kernels/op_table.h"
#include "dsa/model/dsa_model.h"

namespace dsa::e2e {

// Writes the narrow checkpoint into dir / "v32" with the dsa binary `dsa`, `extra` make-checkpoint
// flags after the narrow ones (a later --set wins). "" when written; else the command's output.
std::string make_narrow_checkpoint(const std::string& dsa, const std::filesystem::path& dir,
                                   const std::string& extra = "");

// Loads it on `ops` for `requests` concurrent requests at d draft tokens (CUDA graphs on a device).
std::unique_ptr<model::DsaModel> load_narrow(const std::filesystem::path& dir,
                                             const kernels::OpTable& ops, int32_t d,
                                             int32_t requests);

// What a teacher-forced comparison measured, over every prompt's continuation rows.
struct TeacherForced {
  int32_t rows = 0, clear = 0, agree = 0;  // rows; those whose CPU gap clears tau; argmax agreeing
  double relative_sum = 0;                 // over rows: mean |dlogit| / the CPU row's spread
  double relative_mean() const { return rows > 0 ? relative_sum / double(rows) : 0; }
};

// Each prompt followed by its continuation, one EXTEND forward on each model, `other`'s logits
// compared with `reference`'s row by row over the continuation's rows: each row's mean |error|
// over the reference row's spread (its standard deviation), and where the reference's top-two gap
// clears kNearTieTau whether the argmax agrees. Prints each prompt's figures and the total under
// `label`; a non-finite logit of `other` or a constant reference row is a test failure.
TeacherForced compare_teacher_forced(const std::string& label, model::DsaModel& reference,
                                     model::DsaModel& other,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& continuation);

}  // namespace dsa::e2e
