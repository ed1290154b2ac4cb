// A loaded DeepSeek-V3.2-architecture model (SPEC.md §8) with its MTP layer (§6.5): weights,
// RoPE tables, the paged caches of every layer and the page manager, run through an op table.
// The engine builds each forward's metadata with the runtime's one builder and hands it here.
// Weights, RoPE tables, caches and activations live in the op table's backend memory (device
// memory for cuda_ops(): uploaded once at load); each forward copies its metadata and the page
// table there first, and copies hidden states and logits back into the host ForwardOutput.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/model/decoder_block.h"
#include "dsa/model/model_caches.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/weight_store.h"
#include "dsa/runtime/attention_step.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/metadata_mirror.h"
#include "dsa/runtime/page_pool.h"
#include "dsa/runtime/workspace.h"

namespace dsa::model {

enum class MtpChainHidden { kPostNorm, kPreNorm };  // SPEC.md §6.5 `mtp_chain_hidden`

struct ModelOptions {
  int32_t max_context = 2048;      // max_ctx: the longest request served
  int32_t num_draft_tokens = 0;    // d (0 = no speculation)
  int32_t max_requests = 8;        // B_max
  int32_t max_extend_rows = 1024;  // T_ext: rows of one EXTEND forward (chunked prefill)
  int32_t num_pages = 0;           // 0 = enough for max_requests full contexts
  kernels::LatentFormat latent_format = kernels::LatentFormat::kBf16;
  bool dense = false;  // attend to every visible token (K = max_context rounded to 64, <= 2048)
  MtpChainHidden mtp_chain_hidden = MtpChainHidden::kPostNorm;
};

// Output of one forward: final hidden states of every row and fp32 logits of the sampled rows.
struct ForwardOutput {
  std::vector<bf16> hidden;   // [rows_pad, hidden]: post final norm (target) / per mtp_chain_hidden
  std::vector<float> logits;  // [num_samples, vocab]; rows of sample_row == -1 are zeros
};

class DsaModel {
 public:
  static StatusOr<std::unique_ptr<DsaModel>> load(const std::filesystem::path& dir,
                                                  const ModelOptions& options,
                                                  const kernels::OpTable& ops);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const runtime::MetadataConfig& metadata_config() const { return metadata_config_; }
  runtime::PagedCacheManager& pages() { return pages_; }

  // The target model over one forward: tokens [rows_pad] (padded rows: any id in range).
  Status forward_target(const runtime::ForwardMetadata& meta, std::span<const int32_t> tokens,
                        ForwardOutput* out);
  // The MTP layer (§6.5): row r consumes tokens[r] (the token after row r's position) and
  // target_hidden row r ([rows_pad, hidden], the preceding target forward's hidden states, or the
  // MTP layer's own output when chaining).
  Status forward_mtp(const runtime::ForwardMetadata& meta, std::span<const int32_t> tokens,
                     std::span<const bf16> target_hidden, ForwardOutput* out);

 private:
  DsaModel(ModelConfig config, ModelWeights weights, const ModelOptions& options,
           const runtime::MetadataConfig& mc, const kernels::OpTable& ops);
  Status begin_forward(const runtime::ForwardMetadata& meta);
  StatusOr<bf16*> embed(const std::vector<bf16>& table, std::span<const int32_t> tokens,
                        int32_t rows);
  Status rmsnorm(const bf16* x, const std::vector<bf16>& w, bf16* y, int32_t rows,
                 int64_t y_stride = 0);
  // Logits of the sampled rows of `normed`, then hidden [rows_pad, D] and the logits copied back.
  Status head(const runtime::ForwardMetadata& meta, const bf16* normed, const bf16* hidden,
              const LinearWeight& lm_head, ForwardOutput* out);
  BlockContext block_context(const runtime::ForwardMetadata& meta);

  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions options_;
  runtime::MetadataConfig metadata_config_;
  const kernels::OpTable& ops_;
  RopeTables rope_;
  WeightStore store_;
  runtime::PagedCacheManager pages_;
  ModelCaches caches_;
  runtime::AttentionStep attention_;
  runtime::MetadataMirror mirror_;
  runtime::Workspace ws_;
};

}  // namespace dsa::model
