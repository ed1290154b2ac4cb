// One DeepSeek-V3.2 decoder block over the rows of a forward (SPEC.md §8.4–§8.6):
//   h += o_proj(MLA(RMSNorm(h)))   with the lightning indexer and sparse attention,
//   h += FFN(RMSNorm(h))           dense SwiGLU MLP or noaux_tc MoE.
// Every op goes through the op table and every activation lives in the backend's memory (the
// forward's Workspace). Padded rows are computed like any row but are inert in attention (length
// 0) and in the MoE (expert id -1).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/model/expert_parallel.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/weight_store.h"
#include "dsa/runtime/attention_step.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/metadata_mirror.h"
#include "dsa/runtime/workspace.h"

namespace dsa::model {

struct RopeTables {
  std::vector<float> cos, sin;  // [T_rope, 32], host-built; read through the WeightStore
  int32_t num_positions = 0;
};

struct BlockContext {
  const kernels::OpTable& ops;
  const ModelConfig& config;
  const WeightStore& weights;  // backend copies of the weights and the RoPE tables
  const RopeTables& rope;
  runtime::AttentionStep& attention;
  const runtime::ForwardMetadata& meta;   // host: header and host-side decisions
  const runtime::MetadataArrays& arrays;  // meta's arrays and the page table, backend copies
  runtime::Workspace& ws;
  const ExpertParallel* ep = nullptr;  // the MoE's expert parallelism; nullptr = every expert here
  // The attention's row transforms as the fused ops (attention_prologue, indexer_query), one launch
  // each; false: the separate ops they replace (FuseOptions::row_ops). Bit-identical either way.
  bool fused_row_ops = true;
};

// y = x W^T through the op table (bf16 or FP8 weight); y_f32 selects an fp32 output.
Status run_linear(const kernels::OpTable& ops, const WeightStore& store, const LinearWeight& w,
                  const bf16* x, int32_t rows, bf16* y, float* y_f32 = nullptr);

// The residual stream of a forward's blocks (backend memory, [rows_pad, hidden] each): h, and the
// branch output of the last block not yet added to it. A block leaves its FFN's output pending,
// and the next norm of h (the next block's input norm, or the final norm) adds it in the same
// launch (add_rmsnorm): one kernel fewer per layer, bit-identical to adding first.
// Before the first block h may also still be the embedding lookup of the forward's tokens: the
// first norm then gathers the table rows itself and stores them to h as it reads them (rmsnorm's
// x_rows / x_copy), one launch instead of the embedding and the norm.
struct ResidualStream {
  bf16* h = nullptr;
  bf16* branch = nullptr;  // a [rows_pad, hidden] buffer that outlives the blocks
  bool pending = false;    // branch is still to be added to h
  // Set: h is still to be gathered: row t of h is row ids[t] of table (vocab rows; an id outside
  // them is a zero row, and OutOfRange in checked mode, as the embedding op has it).
  const bf16* table = nullptr;
  const int32_t* ids = nullptr;
  int32_t vocab = 0;
};

// y = RMSNorm(row x_rows[t] of x) with weight w over the hidden width (rmsnorm's gather, no copy
// of the rows first): x_rows in [0, x_row_bound); skip_minus_one: a -1 entry is a zero row (else
// OutOfRange in checked mode); x_copy (or null): the gathered rows are also stored there.
Status gathered_rmsnorm(const BlockContext& ctx, const bf16* x, const int32_t* x_rows,
                        int32_t x_row_bound, bool skip_minus_one, bf16* x_copy,
                        const std::vector<bf16>& w, bf16* y, int32_t rows, int64_t y_stride);
// The params gathered_rmsnorm launches with, for a caller that pairs two norms in one launch
// (ops.rmsnorm_pair: the MTP layer's enorm and hnorm).
kernels::RmsNormParams gathered_rmsnorm_params(const BlockContext& ctx, const bf16* x,
                                               const int32_t* x_rows, int32_t x_row_bound,
                                               bool skip_minus_one, bf16* x_copy,
                                               const std::vector<bf16>& w, bf16* y, int32_t rows,
                                               int64_t y_stride);

// y = RMSNorm(h) with weight w, adding the pending branch into h first, or gathering h from the
// embedding table first (then neither is pending).
Status norm_residual(const BlockContext& ctx, ResidualStream& r, const std::vector<bf16>& w,
                     bf16* y, int32_t rows, int64_t y_stride = 0);

// Runs one block on the residual stream: h takes the attention's output, and the FFN's output is
// left pending in r.branch.
Status run_decoder_block(const BlockContext& ctx, const DecoderLayerWeights& w,
                         const runtime::LayerCaches& caches, ResidualStream& r);

}  // namespace dsa::model
