// Tests only: random acceptance batches (host buffers) for the CPU reference, the GPU kernel and
// the engine's host rule. Drafts follow each request's own target tokens for a random number of
// positions and then go wrong (another id, an out-of-vocabulary id or -1), so every accept count
// 0..d occurs; some rows carry the sampler's edge values (ties, NaN, -inf, +inf, no eligible
// token).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/sampling/sampler.h"
#include "dsa/testing/random.h"

namespace dsa::kernels::acceptance_test {

struct AcceptBatch {
  int32_t requests = 0, drafts_per_request = 0, vocab = 0;
  std::vector<float> logits, temperature, top_p;
  std::vector<int32_t> top_k, drafts, first_position;
  std::vector<uint64_t> seed;

  int32_t rows_per_request() const { return drafts_per_request + 1; }
  std::span<const float> rows(int32_t b) const {  // request b's d + 1 verify rows
    const size_t n = size_t(rows_per_request()) * size_t(vocab);
    return {logits.data() + size_t(b) * n, n};
  }
  std::span<const int32_t> drafts_of(int32_t b) const {
    return {drafts.data() + size_t(b) * size_t(drafts_per_request), size_t(drafts_per_request)};
  }
  SamplingParams sampling(int32_t b) const {
    return {temperature[size_t(b)], top_p[size_t(b)], top_k[size_t(b)], seed[size_t(b)]};
  }
  // Params over these buffers (host, or device copies of the same fields).
  AcceptanceParams params(const float* l, const int32_t* g, const float* t, const float* p,
                          const int32_t* k, const uint64_t* s, const int32_t* first,
                          int32_t* accepted, int32_t* emitted) const {
    AcceptanceParams q;
    q.logits = l;
    q.requests = requests;
    q.drafts_per_request = drafts_per_request;
    q.vocab = vocab;
    q.drafts = g;
    q.temperature = t;
    q.top_p = p;
    q.top_k = k;
    q.seed = s;
    q.first_position = first;
    q.accepted = accepted;
    q.emitted = emitted;
    return q;
  }
  AcceptanceParams host_params(int32_t* accepted, int32_t* emitted) const {
    return params(logits.data(), drafts.data(), temperature.data(), top_p.data(), top_k.data(),
                  seed.data(), first_position.data(), accepted, emitted);
  }
};

// The batch's rows at a wider stride, the extra columns `fill` (a value that would win if read).
inline std::vector<float> strided_logits(const AcceptBatch& a, int64_t stride, float fill) {
  const size_t rows = a.logits.size() / size_t(a.vocab);
  std::vector<float> out(rows * size_t(stride), fill);
  for (size_t r = 0; r < rows; ++r) {
    std::copy_n(a.logits.begin() + long(r * size_t(a.vocab)), a.vocab,
                out.begin() + long(r * size_t(stride)));
  }
  return out;
}

// Overwrites one row with an edge case of the sampler (`which` picks it).
inline void edge_row(std::span<float> x, int which) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const size_t V = x.size();
  switch (which % 5) {
    case 0:  // duplicated maximum: ties to the lowest id
      x[V - 1] = x[V / 2] = *std::max_element(x.begin(), x.end()) + 1.f;
      break;
    case 1:  // NaN and -inf sprinkled
      for (size_t v = 0; v < V; v += 3) x[v] = std::numeric_limits<float>::quiet_NaN();
      for (size_t v = 1; v < V; v += 7) x[v] = -kInf;
      break;
    case 2:  // no eligible token: y = kNoToken, which never accepts a draft (even a -1 draft)
      std::fill(x.begin(), x.end(), -kInf);
      break;
    case 3:  // +inf tokens: uniform over them
      x[V - 1] = x[V / 3] = kInf;
      break;
    default:  // quantised: many exact ties
      for (float& v : x) v = std::round(v * 2.f) / 2.f;
      break;
  }
}

// Request b's drafts: its own target tokens (under its params) for a random number of positions,
// then a wrong one, then random.
inline void draw_drafts(AcceptBatch& a, int32_t b, testing::Rng& rng) {
  const int32_t d = a.drafts_per_request, n = d + 1, V = a.vocab;
  const int32_t follow = static_cast<int32_t>(rng.randint(0, d));
  const SamplingParams sp = a.sampling(b);
  int32_t* out = a.drafts.data() + size_t(b) * size_t(d);
  for (int32_t j = 0; j < d; ++j) {
    int32_t g = static_cast<int32_t>(rng.randint(0, V - 1));
    if (j <= follow) {
      const std::span<const float> row(a.logits.data() + (size_t(b) * n + j) * size_t(V),
                                       size_t(V));
      const int32_t y = sample_token(row, sp, a.first_position[size_t(b)] + j);
      const int64_t wrong = rng.randint(0, 3);
      // (y + 1 + r) mod V with r in [0, V - 2] is never y; V = 1 has no other in-vocabulary id.
      g = j < follow   ? y
          : wrong == 0 ? -1
          : wrong == 1 || V == 1
              ? V + 3
              : static_cast<int32_t>((int64_t{y} + 1 + rng.randint(0, V - 2)) % V);
    }
    out[j] = g;
  }
}

// B requests of d drafts over V tokens; edge_every > 0 puts an edge row at every edge_every-th row.
inline AcceptBatch random_batch(testing::Rng& rng, int32_t B, int32_t d, int32_t V,
                                int edge_every = 7) {
  struct Mode {
    float t, p;
    int32_t k;
  };
  const Mode modes[] = {{0.f, 1.f, 0},   {1.f, 1.f, 0},   {0.7f, 1.f, 50},
                        {1.2f, 0.9f, 0}, {1.f, 0.95f, V}, {1.f, 1.f, 1},
                        {1.5f, 0.5f, 3}, {0.f, 0.9f, 50}, {0.8f, 0.999f, 0}};
  AcceptBatch a;
  a.requests = B;
  a.drafts_per_request = d;
  a.vocab = V;
  const int32_t n = d + 1;
  for (int32_t b = 0; b < B; ++b) {
    const Mode& m = modes[rng.randint(0, std::size(modes) - 1)];
    a.temperature.push_back(m.t);
    a.top_p.push_back(m.p);
    a.top_k.push_back(m.k);
    a.seed.push_back(rng.engine()());
    const int64_t which = rng.randint(0, 9);
    a.first_position.push_back(which == 0   ? std::numeric_limits<int32_t>::max() - d
                               : which == 1 ? 0
                                            : static_cast<int32_t>(rng.randint(1, 1 << 30)));
    const float stddev = rng.randint(0, 1) ? 1.f : 3.f;
    for (int32_t j = 0; j < n; ++j) {
      const size_t base = a.logits.size();
      for (int32_t v = 0; v < V; ++v) a.logits.push_back(rng.normal(0.f, stddev));
      if (edge_every > 0 && (b * n + j) % edge_every == edge_every - 1) {
        edge_row({a.logits.data() + base, size_t(V)}, int(rng.randint(0, 4)));
      }
    }
    a.drafts.resize(a.drafts.size() + size_t(d));
    draw_drafts(a, b, rng);
  }
  return a;
}

// The batch with every request at temperature 0 (its other params kept: not read at 0) and its
// drafts drawn again against the argmax tokens, so every accept count 0..d occurs greedily.
inline AcceptBatch greedy_batch(AcceptBatch a, testing::Rng& rng) {
  for (float& t : a.temperature) t = 0.f;
  for (int32_t b = 0; b < a.requests; ++b) draw_drafts(a, b, rng);
  return a;
}

// The same batch with its drafts kept on the backend and its positions not yet shifted (the
// engine's overlapped speculative step): a random part of the drafts lives in `slots` (at
// `index`, -1 for those left in `drafts`), the rest stays; each kept draft's `drafts` entry is
// overwritten with a token that would change the answer if read; first_position is lowered by a
// random shift in [0, min(d, first)] that `shift` carries. The op over this form must give the
// batch's own answer.
struct KeptForm {
  std::vector<int32_t> slots, index, drafts, first_position, shift;
  int32_t bound = 0;

  AcceptanceParams with(AcceptanceParams q, const int32_t* g, const int32_t* s, const int32_t* i,
                        const int32_t* first, const int32_t* sh) const {
    q.drafts = g;
    q.draft_slots = s;
    q.draft_index = i;
    q.draft_index_bound = bound;
    q.first_position = first;
    q.shift_accepted = sh;
    return q;
  }
};

inline KeptForm kept_form(const AcceptBatch& a, testing::Rng& rng) {
  const int32_t B = a.requests, d = a.drafts_per_request;
  KeptForm k;
  k.bound = std::max(1, B * d * 2);
  k.slots.resize(size_t(k.bound));
  for (int32_t& v : k.slots) v = static_cast<int32_t>(rng.randint(0, a.vocab + 5));
  k.drafts = a.drafts;
  k.index.assign(size_t(B) * size_t(d), -1);
  std::vector<int32_t> free_slots(size_t(k.bound));
  for (int32_t i = 0; i < k.bound; ++i) free_slots[size_t(i)] = i;
  for (size_t e = 0; e < k.index.size(); ++e) {
    if (rng.randint(0, 3) == 0) continue;  // left in drafts
    const size_t pick = size_t(rng.randint(0, int64_t(free_slots.size()) - 1));
    const int32_t at = free_slots[pick];
    free_slots.erase(free_slots.begin() + long(pick));
    k.index[e] = at;
    k.slots[size_t(at)] = a.drafts[e];
    k.drafts[e] = a.drafts[e] == 0 ? 1 : 0;  // wrong if read (or a different wrong id)
  }
  for (int32_t b = 0; b < B; ++b) {
    const int32_t first = a.first_position[size_t(b)];
    const int32_t sh = static_cast<int32_t>(rng.randint(0, std::min(d, first)));
    k.shift.push_back(sh);
    k.first_position.push_back(first - sh);
  }
  return k;
}

// Kept drafts at the index's edges: draft entry e (of B d) in slot bound - 1 - e (bound = B d, so
// the first entry takes the last slot and the last the first), except every third entry, left in
// `drafts` (-1), and the last entry kept; each kept draft's `drafts` entry made wrong, as
// kept_form. No shift.
inline KeptForm kept_at_the_edges(const AcceptBatch& a) {
  KeptForm k;
  const int32_t entries = a.requests * a.drafts_per_request;
  k.bound = std::max(1, entries);
  k.slots.assign(size_t(k.bound), a.vocab + 1);
  k.drafts = a.drafts;
  k.index.assign(size_t(entries), -1);
  for (int32_t e = 0; e < entries; ++e) {
    if (e % 3 == 1 && e != entries - 1) continue;
    const int32_t at = k.bound - 1 - e;
    k.index[size_t(e)] = at;
    k.slots[size_t(at)] = a.drafts[size_t(e)];
    k.drafts[size_t(e)] = a.drafts[size_t(e)] == 0 ? 1 : 0;
  }
  k.first_position = a.first_position;
  k.shift.assign(size_t(a.requests), 0);
  return k;
}

}  // namespace dsa::kernels::acceptance_test
