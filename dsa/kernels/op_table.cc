#include "dsa/kernels/op_table.h"

#if defined(DSA_HAVE_CUDA)
#include "dsa/cuda/device_info.h"
#endif

namespace dsa::kernels {

const OpTable& cpu_ops() {
  static const OpTable table{
      .backend = Backend::kCpu,
      .name = "cpu",
      .indexer_write = indexer_write_ref,
      .latent_write = latent_write_ref,
      .build_logits_schedule = build_logits_schedule_ref,
      .paged_logits = paged_logits_ref,
      .ragged_logits = ragged_logits_ref,
      .indexer_gather = indexer_gather_ref,
      .latent_gather = latent_gather_ref,
      .topk = topk_ref,
      .paged_logits_topk = paged_logits_topk_ref,
      .sparse_mla_decode = sparse_mla_decode_ref,
      .sparse_mla_prefill = sparse_mla_prefill_ref,
      .embedding = embedding_ref,
      .rmsnorm = rmsnorm_ref,
      .rmsnorm_pair = rmsnorm_pair_ref,
      .residual_add = residual_add_ref,
      .add_rmsnorm = add_rmsnorm_ref,
      .layernorm = layernorm_ref,
      .rope = rope_ref,
      .hadamard = hadamard_ref,
      .linear = linear_ref,
      .batched_linear = batched_linear_ref,
      .moe_routing = moe_routing_ref,
      .moe_group = moe_group_ref,
      .grouped_linear = grouped_linear_ref,
      .swiglu = swiglu_ref,
      .moe_combine = moe_combine_ref,
      .indexer_q_quant = indexer_q_quant_ref,
      .attention_prologue = attention_prologue_ref,
      .indexer_query = indexer_query_ref,
      .row_copy = row_copy_ref,
      .sample_rows = sample_rows_ref,
      .accept_drafts = accept_drafts_ref,
      .step_commit = step_commit_ref,
  };
  return table;
}

#if defined(DSA_HAVE_CUDA)
const OpTable& cuda_op_table();  // op_table_cuda.cc
#endif

StatusOr<const OpTable*> cuda_ops() {
#if defined(DSA_HAVE_CUDA)
  if (cuda::device_count() == 0) {
    return failed_precondition("cuda backend: built, but no CUDA device or driver is present");
  }
  return &cuda_op_table();
#else
  return unimplemented("cuda backend: not built (this build has no nvcc; host-only)");
#endif
}

StatusOr<const OpTable*> ops_for(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return &cpu_ops();
    case Backend::kCuda:
      return cuda_ops();
  }
  return internal_error("unknown backend");
}

}  // namespace dsa::kernels
