// The CUDA backend's op table (built only with nvcc). Every entry takes params holding device
// pointers and launches on cuda::current_stream().
#include "dsa/kernels/op_table.h"

namespace dsa::kernels {

const OpTable& cuda_op_table() {
  static const OpTable table{
      .backend = Backend::kCuda,
      .name = "cuda",
      .indexer_write = indexer_write_cuda,
      .latent_write = latent_write_cuda,
      .build_logits_schedule = build_logits_schedule_cuda,
      .paged_logits = paged_logits_cuda,
      .ragged_logits = ragged_logits_cuda,
      .indexer_gather = indexer_gather_cuda,
      .latent_gather = latent_gather_cuda,
      .topk = topk_cuda,
      .paged_logits_topk = paged_logits_topk_cuda,
      .sparse_mla_decode = sparse_mla_decode_cuda,
      .sparse_mla_prefill = sparse_mla_prefill_cuda,
      .embedding = embedding_cuda,
      .rmsnorm = rmsnorm_cuda,
      .rmsnorm_pair = rmsnorm_pair_cuda,
      .residual_add = residual_add_cuda,
      .add_rmsnorm = add_rmsnorm_cuda,
      .layernorm = layernorm_cuda,
      .rope = rope_cuda,
      .hadamard = hadamard_cuda,
      .linear = linear_cuda,
      .batched_linear = batched_linear_cuda,
      .moe_routing = moe_routing_cuda,
      .moe_group = moe_group_cuda,
      .grouped_linear = grouped_linear_cuda,
      .swiglu = swiglu_cuda,
      .moe_combine = moe_combine_cuda,
      .indexer_q_quant = indexer_q_quant_cuda,
      .attention_prologue = attention_prologue_cuda,
      .indexer_query = indexer_query_cuda,
      .row_copy = row_copy_cuda,
      .sample_rows = sample_rows_cuda,
      .accept_drafts = accept_drafts_cuda,
      .step_commit = step_commit_cuda,
  };
  return table;
}

}  // namespace dsa::kernels
