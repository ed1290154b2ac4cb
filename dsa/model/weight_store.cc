#include "dsa/model/weight_store.h"

#include <span>

#include "dsa/core/check.h"
#include "dsa/runtime/random_fill.h"

namespace dsa::model {

namespace {

Status add_linear(WeightStore& s, const LinearWeight& w) {
  DSA_RETURN_IF_ERROR(s.add(w.bf16_w));
  DSA_RETURN_IF_ERROR(s.add(w.fp8_w));
  return s.add(w.scale_inv);
}

Status add_mlp(WeightStore& s, const MlpWeights& m) {
  DSA_RETURN_IF_ERROR(add_linear(s, m.gate));
  DSA_RETURN_IF_ERROR(add_linear(s, m.up));
  return add_linear(s, m.down);
}

Status add_block(WeightStore& s, const DecoderLayerWeights& b) {
  DSA_RETURN_IF_ERROR(s.add(b.input_norm));
  DSA_RETURN_IF_ERROR(s.add(b.post_attention_norm));
  const AttentionWeights& a = b.attn;
  for (const LinearWeight* w : {&a.q_a, &a.q_b, &a.kv_a, &a.o_proj, &a.indexer.wq_b, &a.indexer.wk,
                                &a.indexer.weights_proj}) {
    DSA_RETURN_IF_ERROR(add_linear(s, *w));
  }
  for (const LinearWeight& w : a.w_uk_t) DSA_RETURN_IF_ERROR(add_linear(s, w));
  for (const LinearWeight& w : a.w_uv) DSA_RETURN_IF_ERROR(add_linear(s, w));
  DSA_RETURN_IF_ERROR(s.add(a.q_a_norm));
  DSA_RETURN_IF_ERROR(s.add(a.kv_a_norm));
  DSA_RETURN_IF_ERROR(s.add(a.indexer.k_norm_w));
  DSA_RETURN_IF_ERROR(s.add(a.indexer.k_norm_b));
  if (b.mlp) DSA_RETURN_IF_ERROR(add_mlp(s, *b.mlp));
  if (b.moe) {
    DSA_RETURN_IF_ERROR(add_linear(s, b.moe->router));
    DSA_RETURN_IF_ERROR(s.add(b.moe->score_bias));
    for (const MlpWeights& e : b.moe->experts) DSA_RETURN_IF_ERROR(add_mlp(s, e));
    if (b.moe->shared) DSA_RETURN_IF_ERROR(add_mlp(s, *b.moe->shared));
    DSA_RETURN_IF_ERROR(s.add_expert_tables(*b.moe));
  }
  return ok_status();
}

}  // namespace

Status WeightStore::add_bytes(const void* key, const void* host, size_t bytes) {
  if (backend_ == kernels::Backend::kCpu || host == nullptr || bytes == 0) return ok_status();
  if (copies_.contains(key)) return ok_status();
  auto src = std::span<const uint8_t>(static_cast<const uint8_t*>(host), bytes);
  DSA_ASSIGN_OR_RETURN(auto copy, runtime::Buffer<uint8_t>::from_host(backend_, src));
  copies_.emplace(key, std::move(copy));
  return ok_status();
}

Status WeightStore::generate_bytes(const void* key, size_t elem_bytes, size_t count,
                                   const FillSpec& spec) {
  DSA_CHECK(elem_bytes == fill_elem_bytes(spec.kind));
  if (count == 0 || copies_.contains(key)) return ok_status();
  DSA_ASSIGN_OR_RETURN(auto buf, runtime::Buffer<uint8_t>::alloc(backend_, count * elem_bytes));
  DSA_RETURN_IF_ERROR(runtime::random_fill(backend_, buf.data(), count, spec));
  copies_.emplace(key, std::move(buf));
  return ok_status();
}

const void* WeightStore::get_bytes(const void* key, const void* host) const {
  auto it = copies_.find(key);
  if (it != copies_.end()) return it->second.data();
  DSA_CHECK(backend_ == kernels::Backend::kCpu || host == nullptr);
  return host;
}

Status WeightStore::add_expert_tables(const MoeWeights& w) {
  std::vector<const bf16*> gate, up, down;
  for (const MlpWeights& e : w.experts) {
    if (e.gate.is_fp8() || e.up.is_fp8() || e.down.is_fp8()) return ok_status();
    gate.push_back(get(e.gate.bf16_w));
    up.push_back(get(e.up.bf16_w));
    down.push_back(get(e.down.bf16_w));
  }
  ExpertTables t;
  using Table = runtime::Buffer<const bf16*>;
  DSA_ASSIGN_OR_RETURN(t.gate, Table::from_host(backend_, std::span<const bf16* const>(gate)));
  DSA_ASSIGN_OR_RETURN(t.up, Table::from_host(backend_, std::span<const bf16* const>(up)));
  DSA_ASSIGN_OR_RETURN(t.down, Table::from_host(backend_, std::span<const bf16* const>(down)));
  expert_tables_[&w] = std::move(t);
  return ok_status();
}

const WeightStore::ExpertTables* WeightStore::expert_tables(const MoeWeights& w) const {
  auto it = expert_tables_.find(&w);
  return it == expert_tables_.end() ? nullptr : &it->second;
}

Status WeightStore::add_model(const ModelWeights& w) {
  DSA_RETURN_IF_ERROR(add(w.embed));
  for (const DecoderLayerWeights& b : w.layers) DSA_RETURN_IF_ERROR(add_block(*this, b));
  DSA_RETURN_IF_ERROR(add(w.final_norm));
  DSA_RETURN_IF_ERROR(add_linear(*this, w.lm_head));
  if (!w.mtp) return ok_status();
  const MtpWeights& m = *w.mtp;
  DSA_RETURN_IF_ERROR(add(m.enorm));
  DSA_RETURN_IF_ERROR(add(m.hnorm));
  DSA_RETURN_IF_ERROR(add(m.shared_head_norm));
  DSA_RETURN_IF_ERROR(add_linear(*this, m.eh_proj));
  DSA_RETURN_IF_ERROR(add_block(*this, m.block));
  if (m.embed) DSA_RETURN_IF_ERROR(add(*m.embed));
  if (m.head) DSA_RETURN_IF_ERROR(add_linear(*this, *m.head));
  return ok_status();
}

}  // namespace dsa::model
