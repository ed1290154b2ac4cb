// The feed-forward half of a block (SPEC.md §8.6): the SwiGLU MLP and the noaux_tc MoE, its routed
// experts on this rank alone or split over the expert-parallel ranks (expert_parallel.h).
#include <span>

#include "dsa/model/block_parts.h"

namespace dsa::model {

Status mlp(const BlockContext& c, const MlpWeights& w, const bf16* x, int32_t rows, bf16* y) {
  runtime::Workspace::Frame frame(c.ws);
  const size_t n = size_t(rows) * size_t(w.gate.out);
  DSA_ASSIGN_OR_RETURN(bf16 * g, c.ws.take_uninit<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * u, c.ws.take_uninit<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * act, c.ws.take_uninit<bf16>(n));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.gate, x, rows, g));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.up, x, rows, u));
  DSA_RETURN_IF_ERROR(c.ops.swiglu({g, u, act, int64_t(n)}));
  return run_linear(c.ops, c.weights, w.down, act, rows, y);
}

namespace {

// Device-side dispatch (SPEC.md §8.6, graph modes): the (row, choice) slots are grouped by
// expert on the backend, the grouped linears read each expert's count from there and use a grid
// fixed by rows * k, and the down projection scatters straight into slot order. Padded rows (id -1)
// are neither dispatched nor computed. bf16 and FP8 experts alike (the tables say which form). No
// host synchronisation inside a capture, so a graph can capture it; eagerly, a prefill-sized FP8
// call (>= 32 pairs an expert) reads the counts back once and runs one cuBLASLt GEMM an expert
// (grouped_linear_fp8_cuda.h, the prefill form), within class T of the captured form.
// `with_shared` (the shared expert in the tables, t.shared_in_table): it is expert E and every row
// has k + 1 slots, the last its own.
Status routed_experts(const BlockContext& c, const WeightStore::ExpertTables& t, const bf16* x,
                      int32_t rows, int32_t inter, const int32_t* ids, bool with_shared,
                      bf16* routed) {
  const ModelConfig& cf = c.config;
  const int32_t shared = with_shared ? 1 : 0;
  const int32_t E = int32_t(cf.n_routed_experts) + shared;
  const int32_t k = int32_t(cf.num_experts_per_tok) + shared;
  const int32_t D = int32_t(cf.hidden_size), slots = rows * k;
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(int32_t * offsets, c.ws.take_uninit<int32_t>(size_t(E) + 1));
  DSA_ASSIGN_OR_RETURN(int32_t * pair_row, c.ws.take_uninit<int32_t>(size_t(slots)));
  DSA_ASSIGN_OR_RETURN(int32_t * pair_slot, c.ws.take_uninit<int32_t>(size_t(slots)));
  kernels::MoeGroupParams gp;
  gp.expert_ids = ids;
  gp.num_slots = slots;
  gp.num_experts = E;
  gp.k = k;
  gp.offsets = offsets;
  gp.pair_row = pair_row;
  gp.pair_slot = pair_slot;
  DSA_RETURN_IF_ERROR(c.ops.moe_group(gp));

  // Pair rows past offsets[E] (padded rows' slots) are written by no grouped linear and read by
  // none: uninitialised like the rest.
  const size_t n = size_t(slots) * size_t(inter);
  DSA_ASSIGN_OR_RETURN(bf16 * gate, c.ws.take_uninit<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * up, c.ws.take_uninit<bf16>(n));
  DSA_ASSIGN_OR_RETURN(bf16 * act, c.ws.take_uninit<bf16>(n));
  // `second` / `out_b`: FP8 only, a second projection of the same pairs in the same launch.
  auto grouped = [&](const bf16* in, int32_t in_rows, const int32_t* in_row,
                     const WeightStore::ExpertTable& w, int32_t in_f, int32_t out_f, bf16* out,
                     const int32_t* out_row, const WeightStore::ExpertTable* second = nullptr,
                     bf16* out_b = nullptr) -> Status {
    runtime::Workspace::Frame scratch_frame(c.ws);
    kernels::GroupedLinearParams p;
    p.x = in;
    p.x_rows = in_rows;
    p.x_row = in_row;
    if (w.fp8) {
      p.weights_fp8 = w.weights_fp8.data();
      p.weight_scales = w.scales.data();
      if (second != nullptr) {
        p.weights_fp8_b = second->weights_fp8.data();
        p.weight_scales_b = second->scales.data();
        p.y_b = out_b;
      }
    } else {
      p.weights = w.weights.data();
    }
    p.offsets = offsets;
    p.num_groups = E;
    p.capacity = slots;
    p.max_group_pairs = rows;  // a row picks an expert (and the shared one) at most once
    p.in_features = in_f;
    p.out_features = out_f;
    p.y = out;
    p.y_rows = slots;
    p.y_row = out_row;
    // FP8 on CUDA: the quantised rows go to workspace scratch (256-byte aligned, kept across
    // forwards), so the call neither allocates nor synchronises inside a graph.
    p.scratch_bytes =
        c.ops.backend == kernels::Backend::kCpu ? 0 : kernels::grouped_linear_scratch_bytes(p);
    if (p.scratch_bytes > 0) {
      DSA_ASSIGN_OR_RETURN(uint8_t * scratch, c.ws.take_uninit<uint8_t>(p.scratch_bytes));
      p.scratch = scratch;
    }
    return c.ops.grouped_linear(p);
  };
  if (t.gate.fp8 && t.up.fp8) {
    // Gate and up in one launch: at decode one projection of the few touched experts is too
    // few CTAs to stream at the bandwidth (bench/RESULTS.md), and x is quantised once.
    DSA_RETURN_IF_ERROR(grouped(x, rows, pair_row, t.gate, D, inter, gate, nullptr, &t.up, up));
  } else {
    DSA_RETURN_IF_ERROR(grouped(x, rows, pair_row, t.gate, D, inter, gate, nullptr));
    DSA_RETURN_IF_ERROR(grouped(x, rows, pair_row, t.up, D, inter, up, nullptr));
  }
  DSA_RETURN_IF_ERROR(c.ops.swiglu({gate, up, act, int64_t(n)}));
  return grouped(act, slots, nullptr, t.down, inter, D, routed, pair_slot);
}

// The routed experts under expert parallelism (expert_parallel.h): every rank's rows and ids are
// gathered, this rank computes the gathered slots of its own experts, every other slot holds
// -0.0, and the reduce-scatter hands each rank its own rows' slots, each the one computing rank's
// value exactly. Fixed sizes (ep.size * rows rows), every call on every rank: graph-capturable.
Status ep_routed_experts(const BlockContext& c, const WeightStore::ExpertTables& t, const bf16* x,
                         int32_t rows, int32_t inter, const int32_t* ids, bf16* routed) {
  const ExpertParallel& ep = *c.ep;
  const ModelConfig& cf = c.config;
  const int32_t E = int32_t(cf.n_routed_experts), k = int32_t(cf.num_experts_per_tok);
  const int32_t D = int32_t(cf.hidden_size);
  const int32_t all_rows = ep.size * rows, all_slots = all_rows * k;
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(bf16 * all_x, c.ws.take_uninit<bf16>(size_t(all_rows) * D));
  DSA_ASSIGN_OR_RETURN(int32_t * all_ids, c.ws.take_uninit<int32_t>(size_t(all_slots)));
  DSA_RETURN_IF_ERROR(ep.group->all_gather(x, all_x, size_t(rows) * D * sizeof(bf16)));
  DSA_RETURN_IF_ERROR(ep.group->all_gather(ids, all_ids, size_t(rows) * k * sizeof(int32_t)));

  // Per slot, through the rank's tables (a gather of 4-byte rows indexed by the expert id; id -1,
  // a padded row, is skipped and keeps the -1 fill): `mine` is the id if this rank owns it, else
  // -1; `foreign` is 0 where another rank owns it, else -1.
  DSA_ASSIGN_OR_RETURN(int32_t * mine, c.ws.take_uninit<int32_t>(size_t(all_slots)));
  DSA_ASSIGN_OR_RETURN(int32_t * foreign, c.ws.take_uninit<int32_t>(size_t(all_slots)));
  const size_t id_bytes = size_t(all_slots) * sizeof(int32_t);
  DSA_RETURN_IF_ERROR(c.ws.memory().fill(mine, 0xFF, id_bytes));  // int32 -1
  DSA_RETURN_IF_ERROR(c.ws.memory().fill(foreign, 0xFF, id_bytes));
  auto remap = [&](const int32_t* table, int32_t* out) {
    kernels::RowCopyParams p;
    p.src = table;
    p.dst = out;
    p.index = all_ids;
    p.src_stride = p.dst_stride = p.row_bytes = sizeof(int32_t);
    p.num_rows = all_slots;
    p.index_bound = E;
    p.mode = kernels::RowCopyMode::kGather;
    return c.ops.row_copy(p);
  };
  DSA_RETURN_IF_ERROR(remap(ep.owned, mine));
  DSA_RETURN_IF_ERROR(remap(ep.foreign, foreign));

  // Zeroed so a padded row's slots (written by no rank) sum to zeros; then -0.0 into every slot
  // of another rank's expert, and this rank's own slots from its experts.
  DSA_ASSIGN_OR_RETURN(bf16 * all_routed, c.ws.take_zeroed<bf16>(size_t(all_slots) * D));
  kernels::RowCopyParams nz;
  nz.src = ep.negative_zero;
  nz.dst = all_routed;
  nz.index = foreign;
  nz.row_bytes = int64_t(D) * int64_t(sizeof(bf16));
  nz.src_stride = nz.dst_stride = nz.row_bytes;  // the table has the one row 0
  nz.num_rows = all_slots;
  nz.index_bound = 1;
  nz.mode = kernels::RowCopyMode::kGather;
  DSA_RETURN_IF_ERROR(c.ops.row_copy(nz));
  DSA_RETURN_IF_ERROR(routed_experts(c, t, all_x, all_rows, inter, mine, false, all_routed));
  return ep.group->reduce_scatter_sum_bf16(all_routed, routed, size_t(rows) * k * D);
}

}  // namespace

// y = sum_e g_e E_e(x) + shared(x), summed in fp32, rounded once. With the shared expert in the
// expert tables (fused_projections.h) and a forward of at most kSharedInGroupMaxRows rows, the
// routing gives it the last slot of each row, weight 1, and the combine adds it in the same place:
// one multiply by 1 (exact) and the same add. Larger forwards (prefill chunks) run it as its own
// MLP: there the grouped linear's tiles re-read the weights (V3.2, H100: TTFT 3-6% longer with
// it grouped; at 1, 4 and 8 rows it is 4-10% faster per step, at 32 even; RESULTS 2026-12-06).
constexpr int32_t kSharedInGroupMaxRows = 16;

Status moe(const BlockContext& c, const MoeWeights& w, const bf16* x, int32_t rows, bf16* y) {
  const ModelConfig& cf = c.config;
  const WeightStore::ExpertTables* t = c.weights.expert_tables(w);
  if (t == nullptr) {
    return failed_precondition(
        "moe: no expert tables for this layer (WeightStore::add_expert_tables was not run)");
  }
  const int32_t E = int32_t(cf.n_routed_experts), k = int32_t(cf.num_experts_per_tok);
  const bool with_shared = t->shared_in_table && rows <= kSharedInGroupMaxRows;
  const int32_t slots = k + (with_shared ? 1 : 0);
  const int32_t D = int32_t(cf.hidden_size);
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(float* router, c.ws.take_uninit<float>(size_t(rows) * E));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.router, x, rows, nullptr, router));
  DSA_ASSIGN_OR_RETURN(int32_t * ids, c.ws.take_uninit<int32_t>(size_t(rows) * slots));
  DSA_ASSIGN_OR_RETURN(float* g, c.ws.take_uninit<float>(size_t(rows) * slots));
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
  rp.shared_expert_id = with_shared ? E : -1;
  DSA_RETURN_IF_ERROR(c.ops.moe_routing(rp));

  // routed row r * slots + j: row r's output of its j-th selected expert; the rows of id -1
  // (padded) are never written, and moe_combine skips them.
  DSA_ASSIGN_OR_RETURN(bf16 * routed, c.ws.take_uninit<bf16>(size_t(rows) * slots * D));
  const int32_t inter = w.experts[0].gate.out;
  const bool ep = c.ep != nullptr && c.ep->enabled();
  if (ep && with_shared) {
    return failed_precondition(
        "moe: the shared expert is in the expert tables under expert "
        "parallelism (fused_projections.h leaves it out there)");
  }
  if (ep) {
    DSA_RETURN_IF_ERROR(ep_routed_experts(c, *t, x, rows, inter, ids, routed));
  } else {
    DSA_RETURN_IF_ERROR(routed_experts(c, *t, x, rows, inter, ids, with_shared, routed));
  }
  bf16* shared = nullptr;
  if (w.shared && !with_shared) {
    DSA_ASSIGN_OR_RETURN(shared, c.ws.take_uninit<bf16>(size_t(rows) * D));
    DSA_RETURN_IF_ERROR(mlp(c, *w.shared, x, rows, shared));
  }
  kernels::MoeCombineParams cp{routed, ids, g, shared, y, rows, slots, D};
  return c.ops.moe_combine(cp);
}

}  // namespace dsa::model
