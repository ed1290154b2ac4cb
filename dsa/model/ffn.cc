// The feed-forward half of a block (SPEC.md §8.6): the SwiGLU MLP and the noaux_tc MoE.
#include <span>

#include "dsa/model/block_parts.h"

namespace dsa::model {

Status mlp(const BlockContext& c, const MlpWeights& w, const bf16* x, int32_t rows, bf16* y) {
  runtime::Workspace::Frame frame(c.ws);
  const size_t n = size_t(rows) * size_t(w.gate.out);
  DSA_ASSIGN_OR_RETURN(bf16 * g, c.ws.take<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * u, c.ws.take<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * act, c.ws.take<bf16>(n));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.gate, x, rows, g));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.up, x, rows, u));
  DSA_RETURN_IF_ERROR(c.ops.swiglu({g, u, act, int64_t(n)}));
  return run_linear(c.ops, c.weights, w.down, act, rows, y);
}

namespace {

// Per-expert row lists over the (row, choice) slots r * k + j, each in row order (so results are
// batch invariant): rows[off[e], off[e + 1]) are the input rows and slots[...] the routed slots.
struct ExpertLists {
  std::vector<int32_t> rows, slots, off;
};
ExpertLists expert_lists(const std::vector<int32_t>& ids, int32_t num_experts, int32_t k) {
  ExpertLists l;
  l.off.push_back(0);
  for (int32_t e = 0; e < num_experts; ++e) {
    for (int32_t i = 0; i < int32_t(ids.size()); ++i) {
      if (ids[size_t(i)] != e) continue;
      l.rows.push_back(i / k);
      l.slots.push_back(i);
    }
    l.off.push_back(int32_t(l.rows.size()));
  }
  return l;
}

// Device-side dispatch (SPEC.md §8.6, graph modes): the (row, choice) slots are grouped by
// expert on the backend, the grouped linears read each expert's count from there and use a grid
// fixed by rows * k, and the down projection scatters straight into slot order. Padded rows (id -1)
// are neither dispatched nor computed. No host synchronisation, so a graph can capture it.
Status routed_experts(const BlockContext& c, const WeightStore::ExpertTables& t, const bf16* x,
                      int32_t rows, int32_t inter, const int32_t* ids, bf16* routed) {
  const ModelConfig& cf = c.config;
  const int32_t E = int32_t(cf.n_routed_experts), k = int32_t(cf.num_experts_per_tok);
  const int32_t D = int32_t(cf.hidden_size), slots = rows * k;
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(int32_t * offsets, c.ws.take<int32_t>(size_t(E) + 1));
  DSA_ASSIGN_OR_RETURN(int32_t * pair_row, c.ws.take<int32_t>(size_t(slots)));
  DSA_ASSIGN_OR_RETURN(int32_t * pair_slot, c.ws.take<int32_t>(size_t(slots)));
  kernels::MoeGroupParams gp;
  gp.expert_ids = ids;
  gp.num_slots = slots;
  gp.num_experts = E;
  gp.k = k;
  gp.offsets = offsets;
  gp.pair_row = pair_row;
  gp.pair_slot = pair_slot;
  DSA_RETURN_IF_ERROR(c.ops.moe_group(gp));

  const size_t n = size_t(slots) * size_t(inter);
  DSA_ASSIGN_OR_RETURN(bf16 * gate, c.ws.take<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * up, c.ws.take<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * act, c.ws.take<bf16>(n));
  auto grouped = [&](const bf16* in, int32_t in_rows, const int32_t* in_row,
                     const runtime::Buffer<const bf16*>& w, int32_t in_f, int32_t out_f, bf16* out,
                     const int32_t* out_row) {
    kernels::GroupedLinearParams p;
    p.x = in;
    p.x_rows = in_rows;
    p.x_row = in_row;
    p.weights = w.data();
    p.offsets = offsets;
    p.num_groups = E;
    p.capacity = slots;
    p.in_features = in_f;
    p.out_features = out_f;
    p.y = out;
    p.y_rows = slots;
    p.y_row = out_row;
    return c.ops.grouped_linear(p);
  };
  DSA_RETURN_IF_ERROR(grouped(x, rows, pair_row, t.gate, D, inter, gate, nullptr));
  DSA_RETURN_IF_ERROR(grouped(x, rows, pair_row, t.up, D, inter, up, nullptr));
  DSA_RETURN_IF_ERROR(c.ops.swiglu({gate, up, act, int64_t(n)}));
  return grouped(act, slots, nullptr, t.down, inter, D, routed, pair_slot);
}

// FP8 experts: the expert ids come back to the host to build the per-expert row lists (one
// synchronisation per MoE layer): eager only, a graph capture of it fails.
Status routed_experts_host(const BlockContext& c, const MoeWeights& w, const bf16* x, int32_t rows,
                           const int32_t* ids, bf16* routed) {
  const ModelConfig& cf = c.config;
  const int32_t E = int32_t(cf.n_routed_experts), k = int32_t(cf.num_experts_per_tok);
  const int32_t D = int32_t(cf.hidden_size);
  const runtime::MemoryOps& mem = c.ws.memory();
  runtime::Workspace::Frame frame(c.ws);
  std::vector<int32_t> host_ids(size_t(rows) * k);
  DSA_RETURN_IF_ERROR(mem.copy(host_ids.data(), ids, host_ids.size() * sizeof(int32_t)));
  DSA_RETURN_IF_ERROR(mem.sync());
  const ExpertLists l = expert_lists(host_ids, E, k);
  const size_t listed = l.rows.size();
  DSA_ASSIGN_OR_RETURN(int32_t * list_rows, c.ws.take<int32_t>(listed));
  DSA_ASSIGN_OR_RETURN(int32_t * list_slots, c.ws.take<int32_t>(listed));
  DSA_RETURN_IF_ERROR(mem.copy(list_rows, l.rows.data(), listed * sizeof(int32_t)));
  DSA_RETURN_IF_ERROR(mem.copy(list_slots, l.slots.data(), listed * sizeof(int32_t)));
  const int64_t row_bytes = int64_t{D} * int64_t{sizeof(bf16)};
  for (int32_t e = 0; e < E; ++e) {
    const int32_t first = l.off[size_t(e)], count = l.off[size_t(e) + 1] - first;
    if (count == 0) continue;
    runtime::Workspace::Frame expert_frame(c.ws);
    DSA_ASSIGN_OR_RETURN(bf16 * xe, c.ws.take<bf16>(size_t(count) * D));
    DSA_ASSIGN_OR_RETURN(bf16 * ye, c.ws.take<bf16>(size_t(count) * D));
    kernels::RowCopyParams gather{x,         xe,        list_rows + first,
                                  row_bytes, row_bytes, row_bytes,
                                  count,     rows,      kernels::RowCopyMode::kGather};
    DSA_RETURN_IF_ERROR(c.ops.row_copy(gather));
    DSA_RETURN_IF_ERROR(mlp(c, w.experts[size_t(e)], xe, count, ye));
    kernels::RowCopyParams scatter{ye,        routed,    list_slots + first,
                                   row_bytes, row_bytes, row_bytes,
                                   count,     rows * k,  kernels::RowCopyMode::kScatter};
    DSA_RETURN_IF_ERROR(c.ops.row_copy(scatter));
  }
  return ok_status();
}

}  // namespace

// y = sum_e g_e E_e(x) + shared(x), summed in fp32, rounded once.
Status moe(const BlockContext& c, const MoeWeights& w, const bf16* x, int32_t rows, bf16* y) {
  const ModelConfig& cf = c.config;
  const int32_t E = int32_t(cf.n_routed_experts), k = int32_t(cf.num_experts_per_tok);
  const int32_t D = int32_t(cf.hidden_size);
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(float* router, c.ws.take<float>(size_t(rows) * E));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.router, x, rows, nullptr, router));
  DSA_ASSIGN_OR_RETURN(int32_t * ids, c.ws.take<int32_t>(size_t(rows) * k));
  DSA_ASSIGN_OR_RETURN(float* g, c.ws.take<float>(size_t(rows) * k));
  kernels::MoeRoutingParams rp;
  rp.logits = router;
  rp.bias = c.weights.get(w.score_bias);
  rp.row_len = c.arrays.row_len;
  rp.expert_ids = ids;
  rp.weights = g;
  rp.num_tokens = rows;
  rp.num_experts = E;
  rp.num_groups = int32_t(cf.n_group);
  rp.topk_group = int32_t(cf.topk_group);
  rp.top_k = k;
  rp.routed_scaling_factor = static_cast<float>(cf.routed_scaling_factor);
  rp.norm_topk_prob = cf.norm_topk_prob;
  DSA_RETURN_IF_ERROR(c.ops.moe_routing(rp));

  // routed row r * k + j: row r's output of its j-th selected expert.
  DSA_ASSIGN_OR_RETURN(bf16 * routed, c.ws.take<bf16>(size_t(rows) * k * D));
  if (const WeightStore::ExpertTables* t = c.weights.expert_tables(w)) {
    DSA_RETURN_IF_ERROR(routed_experts(c, *t, x, rows, w.experts[0].gate.out, ids, routed));
  } else {
    DSA_RETURN_IF_ERROR(routed_experts_host(c, w, x, rows, ids, routed));
  }
  bf16* shared = nullptr;
  if (w.shared) {
    DSA_ASSIGN_OR_RETURN(shared, c.ws.take<bf16>(size_t(rows) * D));
    DSA_RETURN_IF_ERROR(mlp(c, *w.shared, x, rows, shared));
  }
  kernels::MoeCombineParams cp{routed, ids, g, shared, y, rows, k, D};
  return c.ops.moe_combine(cp);
}

}  // namespace dsa::model
