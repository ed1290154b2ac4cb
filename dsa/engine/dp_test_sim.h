// One DP rank, simulated down to its metadata (dp_fuzz_test.cc): its own page pool and requests
// (admission, chunked prefill, decode / verify with random accept lengths, finishes), the step
// agreement, placement of the step's arrivals, and every forward of the agreed step built by the
// real builder and checked — validator, shape read back, padded rows inert — then cross-checked
// with the other ranks in the collective that stands for the forward's MoE all-to-all.
#pragma once

#include <fmt/format.h>

#include <deque>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "dsa/engine/dp_placement.h"
#include "dsa/engine/dp_step.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/metadata_validator.h"
#include "dsa/runtime/page_pool.h"

namespace dsa::engine::testing {

struct Arrival {
  int32_t prompt, max_new;
};

// A deliberately broken rank (SPEC.md §9 bug class 10).
struct Fault {
  enum Kind { kNone, kLeave, kSkipAgreement, kIdleSkipsForwards } kind = kNone;
  int32_t rank = -1;
  int64_t step = -1;  // kIdleSkipsForwards: the first step at or after it where the rank is idle
};

struct RankLog {
  std::vector<ForwardShape> forwards;  // every forward this rank ran, in order
  std::vector<StepKind> kinds;         // per step
  int64_t idle_forwards = 0, busy_forwards = 0, padded_rows = 0, steps = 0;
  bool faulted = false;  // the injected fault happened on this rank
};

// Independent of the validator: padded rows and requests hold SPEC.md §4.5's constants, real
// rows never write page 0, and no sample points at a padded row.
inline Status check_padding_inert(const runtime::ForwardMetadata& m) {
  const runtime::MetadataHeader& h = m.header;
  auto bad = [&](const char* what, int32_t i, int32_t v) {
    return failed_precondition(fmt::format("{} {}: {}[{}] = {}", runtime::mode_name(h.mode),
                                           runtime::model_name(h.model), what, i, v));
  };
  for (int32_t r = h.rows; r < h.rows_pad; ++r) {
    const size_t i = size_t(r);
    if (m.row_len[i] != 0) return bad("padded row_len", r, m.row_len[i]);
    if (m.row_topk_len[i] != 0) return bad("padded row_topk_len", r, m.row_topk_len[i]);
    if (m.positions[i] != 0) return bad("padded positions", r, m.positions[i]);
    if (m.write_slot[i] != -1) return bad("padded write_slot", r, m.write_slot[i]);
    if (m.row_page[i] != 0) return bad("padded row_page", r, m.row_page[i]);
    if (m.ks[i] != 0 || m.ke[i] != 0) return bad("padded ks/ke", r, m.ke[i]);
  }
  for (int32_t b = h.num_requests; b < h.batch_pad; ++b) {
    if (m.req_slot[size_t(b)] != 0) return bad("padded req_slot", b, m.req_slot[size_t(b)]);
    if (m.req_kv_len[size_t(b)] != 0) return bad("padded req_kv_len", b, m.req_kv_len[size_t(b)]);
  }
  for (int32_t r = 0; r < h.rows; ++r) {
    if (m.write_slot[size_t(r)] < kernels::kPageSize)
      return bad("write_slot", r, m.write_slot[size_t(r)]);
  }
  for (int32_t i = 0; i < h.num_samples; ++i) {
    if (m.sample_row[size_t(i)] >= h.rows) return bad("sample_row", i, m.sample_row[size_t(i)]);
  }
  return ok_status();
}

class RankSim {
 public:
  RankSim(const runtime::MetadataConfig& mc, const DpStepConfig& dc, uint64_t seed)
      : mc_(mc), dc_(dc), pages_(mc.num_pages, mc.num_rows, mc.page_table_width), rng_(seed) {}

  // One engine step of this rank; `arrivals` are the step's new requests of the whole group.
  Status step(dist::Collective& g, int64_t s, std::span<const Arrival> arrivals, const Fault& f) {
    const bool mine = f.rank == g.rank();
    if (mine && f.kind == Fault::kLeave && s == f.step) {
      log.faulted = true;
      return ok_status();  // stops taking part: the others must not wait forever
    }
    admit();
    plan_work();
    StepPlan plan;
    if (mine && f.kind == Fault::kSkipAgreement && s == f.step) {
      log.faulted = true;  // runs the step as if nothing were to be done anywhere
    } else {
      DSA_ASSIGN_OR_RETURN(plan, agree_step(g, proposal(s), dc_));
      DSA_ASSIGN_OR_RETURN(std::vector<int32_t> owner, place(plan.loads, arrivals));
      for (size_t i = 0; i < arrivals.size(); ++i) {
        if (owner[i] == g.rank())
          waiting_.push_back({0, arrivals[i].prompt, 0, 0, arrivals[i].max_new, 0});
      }
    }
    log.kinds.push_back(plan.kind);
    const bool idle = chunks_.empty() && decode_.empty();
    if (mine && f.kind == Fault::kIdleSkipsForwards && s >= f.step && idle && !log.faulted &&
        plan.kind != StepKind::kNone) {
      log.faulted = true;  // vLLM's DP dummy run: an idle rank that skips the forwards
      plan.kind = StepKind::kNone;
    }
    int64_t id = s * 16;
    for (const ForwardShape& shape : step_forwards(plan, dc_)) {
      DSA_RETURN_IF_ERROR(run_forward(g, shape, id++));
    }
    advance();
    ++log.steps;
    return ok_status();
  }

  RankLog log;

 private:
  struct Req {
    int32_t slot, prompt, prefilled, committed, max_new, emitted;
  };
  struct Chunk {
    size_t req;
    int32_t len;
  };
  int32_t n() const { return dc_.num_draft_tokens + 1; }
  int64_t rand(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  // FIFO while a slot and the pages of the request's whole life (with the 2n lookahead) are free.
  void admit() {
    while (!waiting_.empty() && int32_t(running_.size()) < mc_.max_requests) {
      Req r = waiting_.front();
      const int32_t life = r.prompt + r.max_new + 2 * n();
      if ((life + kernels::kPageSize - 1) / kernels::kPageSize > pages_.num_free_pages()) return;
      auto slot = pages_.open_request();
      DSA_CHECK(slot.ok());
      r.slot = *slot;
      DSA_CHECK(pages_.reserve(r.slot, life).ok());
      running_.push_back(r);
      waiting_.pop_front();
    }
  }

  // This step's work: decodes (with their accept lengths), then prompt chunks within T_ext and
  // T_ext_kv (a chunk longer than d + 1 gathers its whole context).
  void plan_work() {
    decode_.clear();
    chunks_.clear();
    accept_.clear();
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].prefilled == running_[i].prompt) {
        decode_.push_back(i);
        accept_.push_back(int32_t(rand(0, dc_.num_draft_tokens)));
      }
    }
    int32_t rows = int32_t(decode_.size()) * n(), kv = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      const Req& r = running_[i];
      if (r.prefilled == r.prompt) continue;
      int32_t len = std::min<int32_t>(r.prompt - r.prefilled, int32_t(rand(1, 160)));
      len = std::min(len, mc_.max_extend_rows - rows);
      const int32_t gathered = len > n() ? r.prefilled + len : 0;
      if (len < 1 || kv + gathered > mc_.max_extend_kv) continue;
      rows += len;
      kv += gathered;
      chunks_.push_back({i, len});
    }
  }

  StepProposal proposal(int64_t s) const {
    StepProposal p;
    p.step = s;
    p.prefill_requests = int32_t(chunks_.size());
    p.decode_requests = int32_t(decode_.size());
    p.extend_rows = p.decode_requests * n();
    p.chain_requests = p.decode_requests;
    for (const Chunk& c : chunks_) {
      p.extend_rows += c.len;
      const Req& r = running_[c.req];
      p.chain_requests += r.prefilled + c.len == r.prompt;
    }
    for (const Req& r : waiting_) p.load += placement_cost(r.prompt, r.max_new);
    for (const Req& r : running_) p.load += (r.prompt - r.prefilled) + (r.max_new - r.emitted);
    return p;
  }

  static StatusOr<std::vector<int32_t>> place(std::span<const int64_t> loads,
                                              std::span<const Arrival> arrivals) {
    std::vector<int64_t> costs;
    for (const Arrival& a : arrivals) costs.push_back(placement_cost(a.prompt, a.max_new));
    return place_requests(loads, costs);
  }

  std::vector<runtime::RequestInput> inputs_for(const ForwardShape& shape) const {
    std::vector<runtime::RequestInput> in;
    const bool mtp = shape.role == ForwardRole::kMtp;
    if (shape.role == ForwardRole::kDraftChain) {
      for (size_t k = 0; k < decode_.size(); ++k) {
        const Req& r = running_[decode_[k]];
        in.push_back({r.slot, r.committed + accept_[k] + shape.chain_step, 1, 0, 1});
      }
      for (const Chunk& c : chunks_) {
        const Req& r = running_[c.req];
        if (r.prefilled + c.len == r.prompt)
          in.push_back({r.slot, r.prompt - 1 + shape.chain_step, 1, 0, 1});
      }
      return in;
    }
    if (shape.mode == runtime::ForwardMode::kExtend) {
      for (const Chunk& c : chunks_) {
        const Req& r = running_[c.req];
        in.push_back({r.slot, r.prefilled, c.len, c.len - 1, r.prefilled + c.len == r.prompt});
      }
    }
    for (size_t k = 0; k < decode_.size(); ++k) {
      const Req& r = running_[decode_[k]];
      in.push_back({r.slot, r.committed, n(), mtp ? accept_[k] : 0, mtp ? 1 : n()});
    }
    return in;
  }

  Status run_forward(dist::Collective& g, const ForwardShape& shape, int64_t id) {
    DSA_ASSIGN_OR_RETURN(runtime::ForwardBatch batch, make_batch(shape, inputs_for(shape), id));
    runtime::ForwardMetadata m(mc_);
    const kernels::PageTable pt = pages_.page_table();
    DSA_RETURN_IF_ERROR(runtime::build_forward_metadata(batch, mc_, pt, m));
    std::optional<runtime::ForwardKey> key;
    if (shape.mode != runtime::ForwardMode::kExtend) {
      key = runtime::ForwardKey{shape.model, batch.mode, shape.batch_pad, shape.rows_per_request};
    }
    DSA_RETURN_IF_ERROR(runtime::validate_forward_metadata(m, mc_, pt, key));
    DSA_RETURN_IF_ERROR(check_padding_inert(m));
    const ForwardShape built = shape_of(m.header, shape.role, shape.chain_step);
    if (!(built == shape)) return internal_error("the built forward's shape is not the agreed one");
    DSA_RETURN_IF_ERROR(cross_check_forward(g, built));
    log.forwards.push_back(built);
    (batch.requests.empty() ? log.idle_forwards : log.busy_forwards) += 1;
    log.padded_rows += m.header.rows_pad - m.header.rows;
    return ok_status();
  }

  // Commits the step: chunks advance (a completed prompt emits its first token), decodes accept
  // a + 1 tokens, some requests stop early (EOS); finished requests free their pages.
  void advance() {
    for (const Chunk& c : chunks_) {
      Req& r = running_[c.req];
      r.prefilled += c.len;
      if (r.prefilled == r.prompt) {
        r.committed = r.prompt;
        r.emitted = 1;
      }
    }
    for (size_t k = 0; k < decode_.size(); ++k) {
      Req& r = running_[decode_[k]];
      r.committed += accept_[k] + 1;
      r.emitted = std::min(r.max_new, r.emitted + accept_[k] + 1);
      if (rand(0, 49) == 0) r.emitted = r.max_new;
    }
    std::vector<Req> kept;
    for (const Req& r : running_) {
      if (r.prefilled == r.prompt && r.emitted >= r.max_new) {
        DSA_CHECK(pages_.close_request(r.slot).ok());
      } else {
        kept.push_back(r);
      }
    }
    running_ = std::move(kept);
  }

  runtime::MetadataConfig mc_;
  DpStepConfig dc_;
  runtime::PagedCacheManager pages_;
  std::mt19937_64 rng_;
  std::deque<Req> waiting_;
  std::vector<Req> running_;
  std::vector<size_t> decode_;
  std::vector<int32_t> accept_;
  std::vector<Chunk> chunks_;
};

}  // namespace dsa::engine::testing
