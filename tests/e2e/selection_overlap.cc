// How much do the rows of one request select the same keys? (Issue 14, item 2: a sparse MLA kernel
// that gathers one tile for every row of a request that selected it pays off only as far as the
// rows' selections overlap.) A measurement, not a test: it prints, and asserts nothing.
//
// Real selections: the tiny model on the CPU, d = 3, greedy, one request at a time over windows
// of testdata/heldout.txt. The op table's sparse_mla_decode is wrapped to record every call's
// selections (the verify's and the draft extend's n <= d + 1 rows of one request; the draft
// chain's single rows and the prompt chunks are not counted), keyed by the layer's latent pool: the
// target's layers appear in multi-row calls only, the MTP layer also in single-row ones (its draft
// decodes). Synthetic selections: V3.2's K = 2048 of 32768 keys, n = 4 rows whose indexer scores
// are one shared score per key plus independent noise of a given size (as scores of nearby queries
// would), top-K each.
// For n rows with selections S_1..S_n of sizes k_i, printed per layer (means over the calls):
//   union / k   |S_1 ∪ ... ∪ S_n| / mean k_i: the keys a shared kernel gathers, in units of one
//               row's selection (1 = every row the same keys, n = disjoint). A row-at-a-time kernel
//               gathers n; a shared one gathers this, and each row then scores all of them (its
//               MMA work grows by the same factor unless the tiles are cut to the row's own keys).
//   with row 1  |S_i ∩ S_1| / k_i over i > 1: the share of a row's keys the request's first row
//               also selected.
//   grouped     the MMA work of a shared kernel that keeps each row to its own keys, over a
//               row-at-a-time kernel's: the union grouped by the set of rows that selected each
//               key, each group cut into 64-key tiles, every row scoring the tiles of its groups (1
//               = no waste; above it, the groups' partial last tiles). Its gathers stay union / k.
//   usage: selection_overlap [windows (6)] [window tokens (768)] [new tokens (64)]
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "dsa/engine/engine.h"
#include "dsa/kernels/op_table.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/tokenizer.h"

namespace {

using dsa::Status;

struct Overlap {
  int32_t rows = 0;        // rows with at least one valid slot
  double union_k = 0;      // |union| / mean |S_i|
  double with_first = 0;   // mean over i > 1 of |S_i ∩ S_1| / |S_i|
  double grouped_mma = 0;  // scored (row, key) pairs of the grouped tiling / sum |S_i|
};

// Keys per tile of the grouped tiling (the sparse MLA kernel's key tile).
constexpr int32_t kTile = 64;

// One call's rows, all of one request (one request runs at a time).
Overlap measure(const std::vector<std::vector<int32_t>>& sets) {
  Overlap o;
  std::unordered_set<int32_t> all, first;
  std::map<int32_t, uint32_t> rows_of_key;  // key -> the rows that selected it (bit i: row i)
  double sizes = 0, shared = 0;
  for (const auto& s : sets) {
    if (s.empty()) continue;
    for (int32_t k : s) rows_of_key[k] |= 1u << o.rows;
    ++o.rows;
    sizes += double(s.size());
    all.insert(s.begin(), s.end());
    if (o.rows == 1) {
      first.insert(s.begin(), s.end());
      continue;
    }
    size_t common = 0;
    for (int32_t k : s) common += first.count(k);
    shared += double(common) / double(s.size());
  }
  if (o.rows == 0) return o;
  o.union_k = double(all.size()) / (sizes / o.rows);
  o.with_first = o.rows > 1 ? shared / (o.rows - 1) : 1.0;
  // The union grouped by row set, each group cut into tiles: a row scores the tiles of the groups
  // it is in, so a tile never carries a key none of its rows selected; the waste is the groups'
  // last, partial tiles.
  std::map<uint32_t, int64_t> group_sizes;
  for (const auto& [key, mask] : rows_of_key) ++group_sizes[mask];
  double pairs = 0;
  for (const auto& [mask, n] : group_sizes) {
    pairs += double((n + kTile - 1) / kTile * kTile) * std::popcount(mask);
  }
  o.grouped_mma = pairs / sizes;
  return o;
}

// The speculative forwards' rows per request: at most d + 1 (the verify, the draft extend). A
// call with more rows is a prompt chunk (EXTEND), whose rows lie far apart: not counted.
constexpr int32_t kDrafts = 3, kMaxStepRows = kDrafts + 1;

struct LayerStats {
  int32_t first_seen = 0;
  bool single_row_calls = false;
  std::vector<Overlap> multi;  // calls with 2..kMaxStepRows rows
};

std::map<const uint8_t*, LayerStats> g_layers;
const dsa::kernels::OpTable* g_cpu = nullptr;

Status recording_decode(const dsa::kernels::SparseMlaDecodeParams& p) {
  if (p.rows > kMaxStepRows) return g_cpu->sparse_mla_decode(p);  // a prompt chunk
  auto [it, added] = g_layers.try_emplace(p.cache.data);
  if (added) it->second.first_seen = int32_t(g_layers.size()) - 1;
  std::vector<std::vector<int32_t>> sets(size_t(p.rows));
  for (int32_t r = 0; r < p.rows; ++r) {
    const int32_t len = p.topk_len != nullptr ? p.topk_len[r] : p.topk;
    for (int32_t j = 0; j < len; ++j) {
      const int32_t slot = p.indices[int64_t(r) * p.topk + j];
      if (slot >= 0) sets[size_t(r)].push_back(slot);
    }
  }
  const Overlap o = measure(sets);
  if (o.rows == 1) it->second.single_row_calls = true;
  if (o.rows >= 2) it->second.multi.push_back(o);
  return g_cpu->sparse_mla_decode(p);
}

void print_row(const char* label, const std::vector<Overlap>& v) {
  if (v.empty()) return;
  double rows = 0, u = 0, w = 0, g = 0, u_max = 0, w_min = 1;
  for (const Overlap& o : v) {
    rows += o.rows;
    u += o.union_k;
    w += o.with_first;
    g += o.grouped_mma;
    u_max = std::max(u_max, o.union_k);
    w_min = std::min(w_min, o.with_first);
  }
  const double n = double(v.size());
  std::printf("%-26s %6zu %6.2f %9.3f %9.3f %9.3f %9.3f %9.3f\n", label, v.size(), rows / n, u / n,
              u_max, w / n, w_min, g / n);
}

void print_header() {
  std::printf("%-26s %6s %6s %9s %9s %9s %9s %9s\n", "", "calls", "rows", "union/k", "max",
              "w/ row 1", "min", "grouped");
}

// Synthetic: n rows' scores = shared + noise * N(0, 1) over `keys` keys, top-k each.
void synthetic(int32_t keys, int32_t k, int32_t n, const std::vector<double>& noises) {
  std::mt19937_64 rng(20261205);
  std::normal_distribution<float> normal;
  std::printf("\nsynthetic: %d keys, top-%d, %d rows (scores = shared + noise x N(0, 1))\n", keys,
              k, n);
  print_header();
  for (double noise : noises) {
    std::vector<Overlap> v;
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> shared(static_cast<size_t>(keys));
      for (float& s : shared) s = normal(rng);
      std::vector<std::vector<int32_t>> sets;
      for (int32_t r = 0; r < n; ++r) {
        std::vector<std::pair<float, int32_t>> scored(static_cast<size_t>(keys));
        for (int32_t i = 0; i < keys; ++i)
          scored[size_t(i)] = {shared[size_t(i)] + float(noise) * normal(rng), i};
        std::nth_element(scored.begin(), scored.begin() + k, scored.end(), std::greater<>());
        std::vector<int32_t> s;
        for (int32_t i = 0; i < k; ++i) s.push_back(scored[size_t(i)].second);
        sets.push_back(std::move(s));
      }
      v.push_back(measure(sets));
    }
    char label[64];
    std::snprintf(label, sizeof label, "noise %.2f", noise);
    print_row(label, v);
  }
}

int run(int argc, char** argv) {
  const int32_t windows = argc > 1 ? std::atoi(argv[1]) : 6;
  const int32_t window = argc > 2 ? std::atoi(argv[2]) : 768;
  const int32_t new_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
  if (windows < 1 || window < 2 || new_tokens < 1 || window + new_tokens + 16 > 1024) {
    std::fprintf(stderr, "selection_overlap: windows >= 1, window >= 2, window + new <= 1008\n");
    return 2;
  }
  const std::filesystem::path root = DSA_SOURCE_DIR;
  auto tok = dsa::model::Tokenizer::load(root / "models/tiny-dsa/tokenizer.json");
  if (!tok.ok()) {
    std::fprintf(stderr, "selection_overlap: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::ifstream in(root / "testdata/heldout.txt");
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<int32_t> ids = tok->encode(text.str());
  if (int64_t(ids.size()) < int64_t(windows) * window) {
    std::fprintf(stderr, "selection_overlap: heldout.txt has %zu tokens, fewer than %d x %d\n",
                 ids.size(), windows, window);
    return 2;
  }

  static dsa::kernels::OpTable table = dsa::kernels::cpu_ops();
  g_cpu = &dsa::kernels::cpu_ops();
  table.sparse_mla_decode = recording_decode;
  dsa::model::ModelOptions o;
  o.max_context = 1024;
  o.max_requests = 1;
  o.max_extend_rows = 1024;
  o.num_draft_tokens = kDrafts;
  auto m = dsa::model::DsaModel::load(root / "models/tiny-dsa", o, table);
  if (!m.ok()) {
    std::fprintf(stderr, "selection_overlap: %s\n", m.status().to_string().c_str());
    return 1;
  }
  const int32_t topk = int32_t((*m)->config().index_topk);
  for (int32_t w = 0; w < windows; ++w) {
    dsa::engine::Engine eng(**m, {});
    const std::vector<int32_t> prompt(ids.begin() + int64_t(w) * window,
                                      ids.begin() + int64_t(w + 1) * window);
    auto id = eng.add_request({prompt, new_tokens, {}});
    Status s = id.ok() ? eng.run_to_completion() : id.status();
    if (!s.ok()) {
      std::fprintf(stderr, "selection_overlap: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  std::printf(
      "tiny model, CPU, d = 3, greedy: %d windows of %d heldout tokens, %d new each; "
      "top-%d\n",
      windows, window, new_tokens, topk);
  print_header();
  std::vector<const std::pair<const uint8_t* const, LayerStats>*> order;
  for (const auto& e : g_layers) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](auto* a, auto* b) { return a->second.first_seen < b->second.first_seen; });
  std::vector<Overlap> target;
  for (auto* e : order) {
    char label[64];
    std::snprintf(label, sizeof label, "%s (cache %d)",
                  e->second.single_row_calls ? "MTP layer" : "target layer", e->second.first_seen);
    print_row(label, e->second.multi);
    if (!e->second.single_row_calls)
      target.insert(target.end(), e->second.multi.begin(), e->second.multi.end());
  }
  print_row("target layers, all", target);
  synthetic(32768, 2048, 4, {0.02, 0.05, 0.1, 0.2, 0.5, 1.0});
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
