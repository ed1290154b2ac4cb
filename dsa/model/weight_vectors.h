// Every vector of a ModelWeights, visited in one fixed order: the WeightStore adds them with it,
// and a test can walk two loads of one checkpoint side by side. `f` is called with each
// std::vector<bf16>, <uint8_t> and <float> (const or not, as `w` is); `moe` with each MoE layer
// after its vectors.
#pragma once

#include <type_traits>

#include "dsa/model/model_weights.h"

namespace dsa::model {

namespace detail {

template <typename L, typename F>
void visit_linear(L& w, F& f) {
  f(w.bf16_w);
  f(w.fp8_w);
  f(w.scale_inv);
}

template <typename M, typename F>
void visit_mlp(M& m, F& f) {
  visit_linear(m.gate, f);
  visit_linear(m.up, f);
  visit_linear(m.down, f);
}

template <typename B, typename F, typename G>
void visit_block(B& b, F& f, G& moe) {
  f(b.input_norm);
  f(b.post_attention_norm);
  auto& a = b.attn;
  for (auto* w : {&a.q_a, &a.q_b, &a.kv_a, &a.o_proj, &a.indexer.wq_b, &a.indexer.wk,
                  &a.indexer.weights_proj}) {
    visit_linear(*w, f);
  }
  f(a.w_uk_t.bf16_w);
  f(a.w_uv.bf16_w);
  f(a.q_a_norm);
  f(a.kv_a_norm);
  f(a.indexer.k_norm_w);
  f(a.indexer.k_norm_b);
  if (b.mlp) visit_mlp(*b.mlp, f);
  if (b.moe) {
    visit_linear(b.moe->router, f);
    f(b.moe->score_bias);
    for (auto& e : b.moe->experts) visit_mlp(e, f);
    if (b.moe->shared) visit_mlp(*b.moe->shared, f);
    moe(*b.moe);
  }
}

}  // namespace detail

template <typename W, typename F, typename G>
requires std::is_same_v<std::remove_const_t<W>, ModelWeights>
void for_each_weight_vector(W& w, F&& f, G&& moe) {
  f(w.embed);
  for (auto& b : w.layers) detail::visit_block(b, f, moe);
  f(w.final_norm);
  detail::visit_linear(w.lm_head, f);
  if (!w.mtp) return;
  auto& m = *w.mtp;
  f(m.enorm);
  f(m.hnorm);
  f(m.shared_head_norm);
  detail::visit_linear(m.eh_proj, f);
  detail::visit_block(m.block, f, moe);
  if (m.embed) f(*m.embed);
  if (m.head) detail::visit_linear(*m.head, f);
}

template <typename W, typename F>
void for_each_weight_vector(W& w, F&& f) {
  for_each_weight_vector(w, f, [](auto&) {});
}

}  // namespace dsa::model
