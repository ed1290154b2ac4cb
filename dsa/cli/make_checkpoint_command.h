// `dsa make-checkpoint --config CONFIG.json --out DIR [--num-hidden-layers N] [--n-routed-experts
// E]
// [--hidden-size H] [--set KEY=JSON ...] [--shards K] [--seed S] [--fp8] [--tokenizer-from DIR]`:
// writes a random checkpoint in the layout of the real DeepSeek-V3.2 release (config.json with
// the overrides applied, model-0000i-of-00000K.safetensors shards, model.safetensors.index.json),
// at the shapes of the tensor inventory (model/model_tensors.h). With a quantization_config in the
// config (or --fp8, which adds V3.2's), every Linear weight is F8_E4M3 with an F32 128x128-block
// weight_scale_inv (W = e4m3(W8) * scale_inv, SPEC.md §8.2), everything else bf16 / f32 as stored
// upstream. Weights are scaled so that a forward pass of the random model stays finite.
#pragma once

#include <CLI/CLI.hpp>

namespace dsa::cli {
void add_make_checkpoint_command(CLI::App& app, int* exit_code);
}  // namespace dsa::cli
