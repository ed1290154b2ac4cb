// A loaded DeepSeek-V3.2-architecture model (SPEC.md §8) with its MTP layer (§6.5): weights,
// RoPE tables, the paged caches of every layer and the page manager, run through an op table.
// The engine builds each forward's metadata with the runtime's one builder and hands it here.
// Weights, RoPE tables, caches and activations live in the op table's backend memory (device
// memory for cuda_ops(): uploaded once at load). A forward is three phases:
//   stage   — metadata, page table, token ids (and MTP hidden rows) reach fixed backend buffers by
//             one asynchronous copy (runtime/metadata_mirror.h);
//   body    — every launch, reading only backend buffers: the schedule is rebuilt from row_len,
//             the layers run, the LM head writes the sampled rows' logits; on CUDA with graphs a
//             uniform forward whose B_pad is a bucket replays the body's graph instead (§5);
//   collect — hidden states and logits come back to the host ForwardOutput, then the device
//             error word is read once (ops defer their checks, so the body never synchronises).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/model/decoder_block.h"
#include "dsa/model/forward_graphs.h"
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
  // Bucket padding of uniform forwards (SPEC.md §5): the engine pads B to the smallest bucket
  // >= B (B itself above the last). Empty = no padding.
  std::vector<int32_t> buckets;
  // CUDA only: capture one graph per (model, mode, bucket) at load and replay them.
  bool cuda_graphs = false;
};

// Host-side time of forwards (what graphs remove): host_s runs from the start of a forward until
// its last launch is enqueued (staging, metadata copy, launches or the graph launch); total_s
// includes waiting for the results.
struct ForwardTiming {
  int64_t forwards = 0, replays = 0;
  double host_s = 0, total_s = 0;
};

struct GraphStats {
  int32_t graphs = 0;
  size_t nodes = 0;
  double capture_s = 0;  // warm-up + capture of every graph
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
  // B_pad for a uniform forward of b requests (options().buckets; b without buckets).
  int32_t batch_pad_for(int32_t b) const;
  const ForwardTiming& timing() const { return timing_; }
  const GraphStats& graph_stats() const { return graph_stats_; }
  bool has_graph(const runtime::MetadataHeader& h) const { return graph_for(h) != nullptr; }

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
  Status allocate_outputs();
  // The captured graph a forward with this header replays (nullptr: it runs eagerly).
  const runtime::ForwardGraph* graph_for(const runtime::MetadataHeader& h) const;
  Status capture_graphs();
  Status forward(runtime::ModelKind kind, const runtime::ForwardMetadata& meta,
                 std::span<const int32_t> tokens, std::span<const bf16> hidden, ForwardOutput* out);
  // Every launch of a forward; reads only backend buffers (capturable).
  Status body(runtime::ModelKind kind, const runtime::ForwardMetadata& meta);
  Status target_body(const runtime::ForwardMetadata& meta);
  Status mtp_body(const runtime::ForwardMetadata& meta);
  Status collect(const runtime::ForwardMetadata& meta, ForwardOutput* out);
  StatusOr<bf16*> embed(const std::vector<bf16>& table, int32_t rows);
  Status rmsnorm(const bf16* x, const std::vector<bf16>& w, bf16* y, int32_t rows,
                 int64_t y_stride = 0);
  // Logits of the sampled rows of `normed` and the rows of `hidden` into the output buffers.
  Status head(const runtime::ForwardMetadata& meta, const bf16* normed, const bf16* hidden,
              const LinearWeight& lm_head);
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
  // Outputs at capacity (row_capacity rows), at fixed addresses: what graphs write.
  runtime::Buffer<bf16> hidden_out_;
  runtime::Buffer<float> logits_out_;
  ForwardGraphs graphs_;
  ForwardTiming timing_;
  GraphStats graph_stats_;
};

}  // namespace dsa::model
