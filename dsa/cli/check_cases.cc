#include "dsa/cli/check_cases.h"

#include "dsa/kernels/activation/activation_check.h"
#include "dsa/kernels/attention_prologue/attention_prologue_check.h"
#include "dsa/kernels/batched_linear/batched_linear_check.h"
#include "dsa/kernels/embedding/embedding_check.h"
#include "dsa/kernels/gather/gather_check.h"
#include "dsa/kernels/gather/row_copy_check.h"
#include "dsa/kernels/hadamard/hadamard_check.h"
#include "dsa/kernels/indexer_query/indexer_query_check.h"
#include "dsa/kernels/indexer_write/indexer_q_quant_check.h"
#include "dsa/kernels/indexer_write/indexer_write_check.h"
#include "dsa/kernels/latent_write/latent_write_check.h"
#include "dsa/kernels/layernorm/layernorm_check.h"
#include "dsa/kernels/linear/linear_check.h"
#include "dsa/kernels/logits_schedule/logits_schedule_check.h"
#include "dsa/kernels/moe_dispatch/moe_combine_check.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/kernels/moe_routing/moe_routing_check.h"
#include "dsa/kernels/paged_logits/paged_logits_check.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_check.h"
#include "dsa/kernels/ragged_logits/ragged_logits_check.h"
#include "dsa/kernels/rmsnorm/rmsnorm_check.h"
#include "dsa/kernels/rope/rope_check.h"
#include "dsa/kernels/sparse_mla/sparse_mla_check.h"
#include "dsa/kernels/step_commit/step_commit_check.h"
#include "dsa/kernels/topk/topk_check.h"
#include "dsa/runtime/attention_step_check.h"

namespace dsa::cli {

using namespace dsa::kernels;  // NOLINT: the case table names every op

// V3.2 shapes (SPEC.md §1.1): index heads 64, D_i 128, K 2048, MLA heads 128, P 64, G 132. The
// large cases keep to a few requests so the CPU reference finishes in seconds.
std::vector<CheckCase> check_cases(const OpTable& ops) {
  std::vector<CheckCase> cases;
  auto add = [&](std::string op, ShapeClass c, std::string shape,
                 std::function<Status(uint64_t)> run) {
    cases.push_back({std::move(op), c, std::move(shape), std::move(run)});
  };
  const auto kS = ShapeClass::kSmall;
  const auto kV = ShapeClass::kV32;
  const OpTable* o = &ops;

  add("indexer_write", kS, "T=37 D_i=128",
      [o](uint64_t s) { return check_indexer_write(o->indexer_write, 37, s); });
  add("indexer_write", kV, "T=4096 D_i=128",
      [o](uint64_t s) { return check_indexer_write(o->indexer_write, 4096, s); });
  add("latent_write", kS, "T=37 bf16",
      [o](uint64_t s) { return check_latent_write(o->latent_write, 37, LatentFormat::kBf16, s); });
  add("latent_write", kV, "T=4096 fp8-656", [o](uint64_t s) {
    return check_latent_write(o->latent_write, 4096, LatentFormat::kFp8_656, s);
  });
  add("logits_schedule", kS, "B=8 n=4 G=7 L=5000", [o](uint64_t s) {
    return check_logits_schedule(o->build_logits_schedule, 8, 4, 7, 5000, s);
  });
  add("logits_schedule", kV, "B=256 n=4 G=132 L=163840", [o](uint64_t s) {
    return check_logits_schedule(o->build_logits_schedule, 256, 4, 132, 163840, s);
  });
  add("paged_logits", kS, "B=3 n=3 H_i=16 L=700", [o](uint64_t s) {
    return check_paged_logits(o->paged_logits, o->build_logits_schedule, 3, 3, 16, 700, s);
  });
  add("paged_logits", kV, "B=2 n=4 H_i=64 D_i=128 L=4096", [o](uint64_t s) {
    return check_paged_logits(o->paged_logits, o->build_logits_schedule, 2, 4, 64, 4096, s);
  });
  add("ragged_logits", kS, "T=8 H_i=16 L=300",
      [o](uint64_t s) { return check_ragged_logits(o->ragged_logits, 8, 16, 300, s); });
  add("ragged_logits", kV, "T=16 H_i=64 D_i=128 L=4096",
      [o](uint64_t s) { return check_ragged_logits(o->ragged_logits, 16, 64, 4096, s); });
  add("gather", kS, "B=3 L=500",
      [o](uint64_t s) { return check_gather(o->indexer_gather, o->latent_gather, 3, 500, s); });
  add("gather", kV, "B=2 L=4096 (indexer, bf16, fp8-656)",
      [o](uint64_t s) { return check_gather(o->indexer_gather, o->latent_gather, 2, 4096, s); });
  add("topk", kS, "R=16 K=64 L=1000",
      [o](uint64_t s) { return check_topk(o->topk, 16, 64, 1000, s); });
  add("topk", kV, "R=8 K=2048 L=65536",
      [o](uint64_t s) { return check_topk(o->topk, 8, 2048, 65536, s); });
  add("paged_logits_topk", kS, "B=3 n=3 H_i=16 K=64 L=700",
      [o](uint64_t s) { return check_paged_logits_topk(o->paged_logits_topk, 3, 3, 16, 700, s); });
  add("paged_logits_topk", kV, "B=2 n=4 H_i=64 K=64 L=4096",
      [o](uint64_t s) { return check_paged_logits_topk(o->paged_logits_topk, 2, 4, 64, 4096, s); });
  add("sparse_mla_decode", kS, "R=4 H=16 K=64 L=300 bf16", [o](uint64_t s) {
    return check_sparse_mla_decode(o->sparse_mla_decode, 4, 16, 64, 300, LatentFormat::kBf16, s);
  });
  add("sparse_mla_decode", kS, "R=4 H=16 K=64 L=300 fp8-656", [o](uint64_t s) {
    return check_sparse_mla_decode(o->sparse_mla_decode, 4, 16, 64, 300, LatentFormat::kFp8_656, s);
  });
  add("sparse_mla_decode", kV, "R=2 H=128 K=2048 L=4096 fp8-656", [o](uint64_t s) {
    return check_sparse_mla_decode(o->sparse_mla_decode, 2, 128, 2048, 4096, LatentFormat::kFp8_656,
                                   s);
  });
  add("sparse_mla_decode", kV, "R=2 H=128 K=2048 L=4096 bf16", [o](uint64_t s) {
    return check_sparse_mla_decode(o->sparse_mla_decode, 2, 128, 2048, 4096, LatentFormat::kBf16,
                                   s);
  });
  add("sparse_mla_prefill", kS, "T=40 H=16 K=64",
      [o](uint64_t s) { return check_sparse_mla_prefill(o->sparse_mla_prefill, 40, 16, 64, s); });
  add("sparse_mla_prefill", kV, "T=3 H=128 K=2048",
      [o](uint64_t s) { return check_sparse_mla_prefill(o->sparse_mla_prefill, 3, 128, 2048, s); });
  // Model ops (§8): tiny widths, then V3.2 widths.
  add("embedding", kS, "T=37 V=6144 D=256",
      [o](uint64_t s) { return check_embedding(o->embedding, 37, 6144, 256, s); });
  add("rmsnorm", kS, "T=37 D=256",
      [o](uint64_t s) { return check_rmsnorm(o->rmsnorm, 37, 256, s); });
  add("rmsnorm", kV, "T=37 D=7168",
      [o](uint64_t s) { return check_rmsnorm(o->rmsnorm, 37, 7168, s); });
  add("rmsnorm", kS, "T=37 D=256 gathered (50 rows, x_copy)",
      [o](uint64_t s) { return check_rmsnorm_gathered(o->rmsnorm, 37, 256, 50, true, s); });
  add("rmsnorm_pair", kS, "T=37 D=256 gathered (50 and 101 rows)",
      [o](uint64_t s) { return check_rmsnorm_pair(o->rmsnorm_pair, 37, 256, 50, s); });
  add("residual_add", kV, "T=37 D=7168",
      [o](uint64_t s) { return check_residual_add(o->residual_add, 37, 7168, s); });
  add("add_rmsnorm", kS, "T=37 D=100",
      [o](uint64_t s) { return check_add_rmsnorm(o->add_rmsnorm, 37, 100, s); });
  add("add_rmsnorm", kV, "T=37 D=7168",
      [o](uint64_t s) { return check_add_rmsnorm(o->add_rmsnorm, 37, 7168, s); });
  add("layernorm", kV, "T=64 D=128",
      [o](uint64_t s) { return check_layernorm(o->layernorm, 64, 128, s); });
  add("rope", kS, "T=33 H=16", [o](uint64_t s) { return check_rope(o->rope, 33, 16, s); });
  add("rope", kV, "T=33 H=128", [o](uint64_t s) { return check_rope(o->rope, 33, 128, s); });
  add("hadamard", kV, "R=1024 D=128",
      [o](uint64_t s) { return check_hadamard(o->hadamard, 1024, s); });
  // The fused row transforms (bit-identical to the separate ops above on both backends).
  add("attention_prologue", kS, "T=5 q_lora=128",
      [o](uint64_t s) { return check_attention_prologue(o->attention_prologue, 5, 128, s); });
  add("attention_prologue", kV, "T=33 q_lora=1536",
      [o](uint64_t s) { return check_attention_prologue(o->attention_prologue, 33, 1536, s); });
  add("indexer_query", kS, "T=7 H_i=16",
      [o](uint64_t s) { return check_indexer_query(o->indexer_query, 7, 16, s); });
  add("indexer_query", kV, "T=33 H_i=64",
      [o](uint64_t s) { return check_indexer_query(o->indexer_query, 33, 64, s); });
  add("linear", kS, "T=4 256->6144 bf16",
      [o](uint64_t s) { return check_linear(o->linear, 4, 256, 6144, false, s); });
  add("linear", kV, "T=2 7168->1536 fp8 (block 128)",
      [o](uint64_t s) { return check_linear(o->linear, 2, 7168, 1536, true, s); });
  // The absorbed MLA's per-head W_UK (nope -> 512) and W_UV (512 -> v), every head in one op.
  add("batched_linear", kS, "B=16 T=5 64->512",
      [o](uint64_t s) { return check_batched_linear(o->batched_linear, 16, 5, 64, 512, s); });
  add("batched_linear", kV, "B=128 T=3 128->512",
      [o](uint64_t s) { return check_batched_linear(o->batched_linear, 128, 3, 128, 512, s); });
  add("batched_linear", kV, "B=128 T=3 512->128",
      [o](uint64_t s) { return check_batched_linear(o->batched_linear, 128, 3, 512, 128, s); });
  add("swiglu", kS, "T=37 I=768", [o](uint64_t s) { return check_swiglu(o->swiglu, 37, 768, s); });
  add("swiglu", kV, "T=37 I=18432",
      [o](uint64_t s) { return check_swiglu(o->swiglu, 37, 18432, s); });
  add("moe_routing", kS, "T=40 E=4 groups=2/1 top=2",
      [o](uint64_t s) { return check_moe_routing(o->moe_routing, 40, 4, 2, 1, 2, s); });
  add("moe_routing", kV, "T=40 E=256 groups=8/4 top=8",
      [o](uint64_t s) { return check_moe_routing(o->moe_routing, 40, 256, 8, 4, 8, s); });
  add("moe_group", kS, "R=40 E=4 k=2",
      [o](uint64_t s) { return check_moe_group(o->moe_group, 40, 4, 2, s); });
  add("moe_group", kV, "R=4096 E=256 k=8",
      [o](uint64_t s) { return check_moe_group(o->moe_group, 4096, 256, 8, s); });
  add("grouped_linear", kS, "R=40 E=4 k=2 256->128",
      [o](uint64_t s) { return check_grouped_linear(o->grouped_linear, 40, 4, 2, 256, 128, s); });
  add("grouped_linear", kV, "R=2 E=256 k=8 7168->2048", [o](uint64_t s) {
    return check_grouped_linear(o->grouped_linear, 2, 256, 8, 7168, 2048, s);
  });
  add("grouped_linear", kS, "fp8 R=40 E=4 k=2 272->200", [o](uint64_t s) {
    return check_grouped_linear_fp8(o->grouped_linear, 40, 4, 2, 272, 200, s);
  });
  add("grouped_linear", kV, "fp8 R=2 E=256 k=8 7168->2048", [o](uint64_t s) {
    return check_grouped_linear_fp8(o->grouped_linear, 2, 256, 8, 7168, 2048, s);
  });
  add("moe_combine", kS, "T=40 k=2 D=256",
      [o](uint64_t s) { return check_moe_combine(o->moe_combine, 40, 2, 256, s); });
  add("moe_combine", kV, "T=37 k=8 D=7168",
      [o](uint64_t s) { return check_moe_combine(o->moe_combine, 37, 8, 7168, s); });
  add("indexer_q_quant", kS, "T=37 H_i=16 D_i=128",
      [o](uint64_t s) { return check_indexer_q_quant(o->indexer_q_quant, 37, 16, s); });
  add("indexer_q_quant", kV, "T=256 H_i=64 D_i=128",
      [o](uint64_t s) { return check_indexer_q_quant(o->indexer_q_quant, 256, 64, s); });
  add("row_copy", kS, "rows=20 of 50, 6 B",
      [o](uint64_t s) { return check_row_copy(o->row_copy, 20, 50, 6, s); });
  add("step_commit", kS, "B=9, d=3",
      [o](uint64_t s) { return check_step_commit(o->step_commit, 9, 3, s); });
  add("step_commit", kV, "B=256, d=7",
      [o](uint64_t s) { return check_step_commit(o->step_commit, 256, 7, s); });
  add("row_copy", kV, "rows=256 of 1024, D=7168 bf16",
      [o](uint64_t s) { return check_row_copy(o->row_copy, 256, 1024, 7168 * 2, s); });

  // One attention step of every forward mode (metadata builder + validator + the ops above).
  for (runtime::ForwardMode mode : runtime::kAllForwardModes) {
    add(std::string("step:") + std::string(runtime::mode_name(mode)), kS,
        "3 requests, 2 layers, H_i=16 H=16 K=128 d=3",
        [o, mode](uint64_t s) { return runtime::check_attention_step(*o, mode, s); });
  }
  return cases;
}

}  // namespace dsa::cli
