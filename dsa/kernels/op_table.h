// The op table: one plain function table per backend, chosen once (ARCHITECTURE.md §2).
// Layers above kernels/ (the runtime executor, the model, `dsa check`) call ops only through it.
#pragma once

#include <string_view>

#include "dsa/core/status.h"
#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/activation/activation.h"
#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/batched_linear/batched_linear.h"
#include "dsa/kernels/embedding/embedding.h"
#include "dsa/kernels/gather/gather.h"
#include "dsa/kernels/gather/row_copy.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_query/indexer_query.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/kernels/indexer_write/indexer_write.h"
#include "dsa/kernels/latent_write/latent_write.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/moe_dispatch/moe_combine.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"
#include "dsa/kernels/moe_routing/moe_routing.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/kernels/sampling/sampling.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/step_commit/step_commit.h"
#include "dsa/kernels/topk/topk.h"

namespace dsa::kernels {

enum class Backend { kCpu, kCuda };

struct OpTable {
  Backend backend;
  std::string_view name;
  Status (*indexer_write)(const IndexerWriteParams&);            // §3a
  Status (*latent_write)(const LatentWriteParams&);              // §4.7
  Status (*build_logits_schedule)(const LogitsScheduleParams&);  // §3c
  Status (*paged_logits)(const PagedLogitsParams&);              // §3b
  Status (*ragged_logits)(const RaggedLogitsParams&);            // §3d
  Status (*indexer_gather)(const IndexerGatherParams&);          // §3h
  Status (*latent_gather)(const LatentGatherParams&);            // §3h
  Status (*topk)(const TopkParams&);                             // §3e
  // §3b then §3e in one op (decode); the CUDA backend refuses shapes it cannot hold
  // (paged_logits_topk_fits) with ResourceExhausted.
  Status (*paged_logits_topk)(const PagedLogitsTopkParams&);
  Status (*sparse_mla_decode)(const SparseMlaDecodeParams&);    // §3f
  Status (*sparse_mla_prefill)(const SparseMlaPrefillParams&);  // §3g
  // Model ops (§8).
  Status (*embedding)(const EmbeddingParams&);
  Status (*rmsnorm)(const RmsNormParams&);
  // Two norms of one shape in one launch (the MTP layer's enorm and hnorm).
  Status (*rmsnorm_pair)(const RmsNormParams&, const RmsNormParams&);
  Status (*residual_add)(const ResidualAddParams&);
  // residual_add then rmsnorm of the updated h in one launch (bit-identical to the pair).
  Status (*add_rmsnorm)(const AddRmsNormParams&);
  Status (*layernorm)(const LayerNormParams&);
  Status (*rope)(const RopeParams&);
  Status (*hadamard)(const HadamardParams&);
  Status (*linear)(const LinearParams&);
  // One bf16 linear per batch over strided operands: the absorbed MLA's per-head W_UK / W_UV.
  Status (*batched_linear)(const BatchedLinearParams&);
  Status (*moe_routing)(const MoeRoutingParams&);
  // MoE dispatch on the backend (§8.6), no host synchronisation: graph-capturable.
  Status (*moe_group)(const MoeGroupParams&);
  Status (*grouped_linear)(const GroupedLinearParams&);
  // Between the model's GEMMs, so activations never leave the backend memory (§8.5, §8.6).
  Status (*swiglu)(const SwigluParams&);
  Status (*moe_combine)(const MoeCombineParams&);
  Status (*indexer_q_quant)(const IndexerQuantParams&);
  // The attention's row transforms after its first projections (q_a's and the latent's norms, the
  // indexer key's norm, RoPE and Hadamard) and the indexer query's RoPE, Hadamard and
  // quantisation, each in one launch; bit-identical to the separate ops above.
  Status (*attention_prologue)(const AttentionPrologueParams&);
  Status (*indexer_query)(const IndexerQueryParams&);
  Status (*row_copy)(const RowCopyParams&);
  // Sampling and acceptance (§6.2, §6.3) on the backend: from rows of logits to tokens, and from
  // verify rows and drafts to accepted counts and emitted tokens, so on the device only those
  // few bytes per request need to reach the host.
  Status (*sample_rows)(const SamplingOpParams&);
  Status (*accept_drafts)(const AcceptanceParams&);
  // The forwards after a verify patched from its accepted counts where they are (§6.7), so a
  // speculative step needs no host round trip between its forwards.
  Status (*step_commit)(const StepCommitParams&);
};

// The CPU backend: the references of every op.
const OpTable& cpu_ops();

// The CUDA backend (params hold device pointers): Unimplemented in host-only builds,
// FailedPrecondition when no device is present.
StatusOr<const OpTable*> cuda_ops();

StatusOr<const OpTable*> ops_for(Backend backend);

}  // namespace dsa::kernels
