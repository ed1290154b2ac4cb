#include "dsa/model/fused_projections.h"

#include <fmt/format.h>

#include <initializer_list>
#include <span>

#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

namespace dsa::model {

namespace {

// q_a, wk and kv_a read one input in one weight form; (FP8) the first two end on a scale block;
// and the latent's columns start and repeat on 16 bytes, as the cache write reads them.
bool qkv_a_fusable(const AttentionWeights& a) {
  const bool fp8 = a.q_a.is_fp8();
  for (const LinearWeight* p : {&a.q_a, &a.indexer.wk, &a.kv_a}) {
    if (p->out <= 0 || p->in != a.q_a.in || p->is_fp8() != fp8) return false;
  }
  const int32_t before_latent = a.q_a.out + a.indexer.wk.out;
  if (before_latent % 8 != 0 || (before_latent + a.kv_a.out) % 8 != 0) return false;
  return !fp8 || (a.q_a.out % 128 == 0 && a.indexer.wk.out % 128 == 0);
}

// q_b and wq_b read one input in one weight form; (FP8) q_b ends on a scale block; and the
// indexer's columns start on 16 bytes, as do the rows.
bool q_b_fusable(const AttentionWeights& a) {
  const LinearWeight &q = a.q_b, &iq = a.indexer.wq_b;
  if (q.out <= 0 || iq.out <= 0 || q.in != iq.in || q.is_fp8() != iq.is_fp8()) return false;
  if (q.out % 8 != 0 || iq.out % 8 != 0) return false;
  return !q.is_fp8() || q.out % 128 == 0;
}

bool same_shape_and_form(const LinearWeight& a, const LinearWeight& b) {
  return a.out == b.out && a.in == b.in && a.is_fp8() == b.is_fp8();
}

// The shared expert runs as one more routed expert only where it is one of their shape, and where
// E + 1 experts stay within the CUDA grouping's limit (a 512-expert model keeps its MLP).
bool shared_fusable(const MoeWeights& m) {
  if (!m.shared || m.experts.empty()) return false;
  if (int64_t(m.experts.size()) + 1 > kernels::kMoeGroupMaxExpertsCuda) return false;
  const MlpWeights& e = m.experts[0];
  return same_shape_and_form(m.shared->gate, e.gate) && same_shape_and_form(m.shared->up, e.up) &&
         same_shape_and_form(m.shared->down, e.down);
}

// `dst` takes the parts' rows (their outs summed, their in and form) and the store one buffer of
// them.
Status fuse_linear(WeightStore& store, LinearWeight& dst,
                   std::initializer_list<const LinearWeight*> parts) {
  dst.out = 0;
  for (const LinearWeight* p : parts) dst.out += p->out;
  dst.in = (*parts.begin())->in;
  dst.fp8 = (*parts.begin())->is_fp8();
  return store.fuse_rows(dst, std::span<const LinearWeight* const>(parts.begin(), parts.size()));
}

Status fuse_block(const FuseOptions& o, bool expert_parallel, DecoderLayerWeights& b,
                  WeightStore& store, FuseCounts& counts) {
  AttentionWeights& a = b.attn;
  if (o.qkv_a && a.qkv_a.out == 0 && qkv_a_fusable(a)) {
    DSA_RETURN_IF_ERROR(fuse_linear(store, a.qkv_a, {&a.q_a, &a.indexer.wk, &a.kv_a}));
    ++counts.qkv_a;
  }
  if (o.q_b && a.q_b_fused.out == 0 && q_b_fusable(a)) {
    DSA_RETURN_IF_ERROR(fuse_linear(store, a.q_b_fused, {&a.q_b, &a.indexer.wq_b}));
    ++counts.q_b;
  }
  if (o.shared_experts && !expert_parallel && b.moe && shared_fusable(*b.moe)) {
    DSA_RETURN_IF_ERROR(store.add_expert_tables(*b.moe, /*with_shared=*/true));
    ++counts.shared_experts;
  }
  return ok_status();
}

}  // namespace

std::string describe_fusion(const FuseCounts& c) {
  return fmt::format(
      "fused at load: q_a + indexer wk + kv_a as one linear in {} block{}, q_b + indexer wq_b in "
      "{} block{}, the shared expert among the routed ones in {} MoE block{}",
      c.qkv_a, c.qkv_a == 1 ? "" : "s", c.q_b, c.q_b == 1 ? "" : "s", c.shared_experts,
      c.shared_experts == 1 ? "" : "s");
}

StatusOr<FuseCounts> fuse_projections(const FuseOptions& options, bool expert_parallel,
                                      ModelWeights& w, WeightStore& store) {
  FuseCounts counts;
  for (DecoderLayerWeights& b : w.layers) {
    DSA_RETURN_IF_ERROR(fuse_block(options, expert_parallel, b, store, counts));
  }
  if (w.mtp) DSA_RETURN_IF_ERROR(fuse_block(options, expert_parallel, w.mtp->block, store, counts));
  return counts;
}

}  // namespace dsa::model
