#include "dsa/runtime/attention_step_check.h"

#include <fmt/format.h>

#include "dsa/runtime/attention_world.h"
#include "dsa/runtime/metadata_validator.h"

namespace dsa::runtime {

namespace {

using testing::AttentionWorld;
using testing::kMlaHeads;
using testing::StepBuffers;

constexpr int32_t kTopk = 128;

MetadataConfig check_config() {
  MetadataConfig c;
  c.num_draft_tokens = 3;
  c.topk = kTopk;
  c.page_table_width = 12;
  c.num_consumers = 5;
  c.max_requests = 16;
  c.max_extend_rows = 1024;
  c.max_extend_kv = 4096;
  c.num_rows = 16;
  c.num_pages = 120;
  return c;
}

// Row r of `a` (in forward ma) must equal row q of `b` (in mb) bit for bit.
Status same_row(const StepBuffers& a, const ForwardMetadata& ma, int32_t r, const StepBuffers& b,
                const ForwardMetadata& mb, int32_t q, int64_t ld, std::string_view where) {
  const int32_t len = ma.row_len[size_t(r)];
  if (len != mb.row_len[size_t(q)]) {
    return internal_error(fmt::format("{}: row_len {} vs {}", where, len, mb.row_len[size_t(q)]));
  }
  for (int32_t s = 0; s < len; ++s) {
    if (a.logits[size_t(r * ld + s)] != b.logits[size_t(q * ld + s)]) {
      return internal_error(fmt::format("{}: logit column {}: {} vs {}", where, s,
                                        a.logits[size_t(r * ld + s)],
                                        b.logits[size_t(q * ld + s)]));
    }
  }
  for (int32_t i = 0; i < kTopk; ++i) {
    if (a.topk[size_t(r * kTopk + i)] != b.topk[size_t(q * kTopk + i)]) {
      return internal_error(fmt::format("{}: top-k entry {} differs", where, i));
    }
  }
  for (int32_t i = 0; i < kMlaHeads * 512; ++i) {
    if (a.out[size_t(r) * kMlaHeads * 512 + i].bits !=
        b.out[size_t(q) * kMlaHeads * 512 + i].bits) {
      return internal_error(fmt::format("{}: attention output element {} differs", where, i));
    }
  }
  for (int32_t h = 0; h < kMlaHeads; ++h) {
    if (a.lse[size_t(r * kMlaHeads + h)] != b.lse[size_t(q * kMlaHeads + h)]) {
      return internal_error(fmt::format("{}: lse of head {} differs", where, h));
    }
  }
  return ok_status();
}

Status inert_row(const StepBuffers& a, int32_t r, std::string_view where) {
  for (int32_t i = 0; i < kTopk; ++i) {
    if (a.topk[size_t(r * kTopk + i)] != -1)
      return internal_error(fmt::format("{}: top-k not -1", where));
  }
  for (int32_t i = 0; i < kMlaHeads * 512; ++i) {
    if (a.out[size_t(r) * kMlaHeads * 512 + i].bits != 0)
      return internal_error(fmt::format("{}: out != 0", where));
  }
  for (int32_t h = 0; h < kMlaHeads; ++h) {
    if (a.lse[size_t(r * kMlaHeads + h)] != INFINITY)
      return internal_error(fmt::format("{}: lse != +inf", where));
  }
  return ok_status();
}

struct Requests {
  std::vector<int32_t> slots, cached, ids;
};

// Opens the same requests in a world and prefills them with one EXTEND forward.
StatusOr<Requests> open_and_prefill(AttentionWorld& w, const std::vector<int32_t>& cached,
                                    int32_t extra) {
  Requests r;
  ForwardBatch batch;
  batch.mode = ForwardMode::kExtend;
  for (size_t b = 0; b < cached.size(); ++b) {
    DSA_ASSIGN_OR_RETURN(int32_t slot, w.pages.open_request());
    DSA_RETURN_IF_ERROR(w.pages.reserve(slot, cached[b] + extra));
    r.slots.push_back(slot);
    r.cached.push_back(cached[b]);
    r.ids.push_back(int32_t(b));
    batch.requests.push_back({slot, 0, cached[b], 0, 0});
  }
  std::vector<StepBuffers> ignored;
  DSA_RETURN_IF_ERROR(w.run(batch, r.ids, &ignored));
  return r;
}

ForwardBatch batch_of(ForwardMode mode, const Requests& r, int32_t delta, int32_t new_len,
                      int32_t batch_pad = 0) {
  ForwardBatch b;
  b.mode = mode;
  b.model = mode == ForwardMode::kDraftExtend ? ModelKind::kMtp : ModelKind::kTarget;
  b.batch_pad = batch_pad;
  for (size_t i = 0; i < r.slots.size(); ++i) {
    b.requests.push_back({r.slots[i], r.cached[i] + delta, new_len, 0, new_len});
  }
  return b;
}

}  // namespace

Status check_attention_step(const kernels::OpTable& ops, ForwardMode mode, uint64_t seed) {
  const MetadataConfig c = check_config();
  const int32_t n = uniform_rows_per_request(mode, c.num_draft_tokens);
  const int32_t new_len = mode == ForwardMode::kExtend ? 70 : std::max(n, 1);
  AttentionWorld a(c, 2, kernels::LatentFormat::kFp8_656, seed, ops);
  AttentionWorld b(c, 2, kernels::LatentFormat::kFp8_656, seed, ops);
  const std::vector<int32_t> cached = {1, 63, 190};
  DSA_ASSIGN_OR_RETURN(Requests ra, open_and_prefill(a, cached, new_len));
  DSA_ASSIGN_OR_RETURN(Requests rb, open_and_prefill(b, cached, new_len));
  const int64_t ld = a.step.logits_ld();
  std::vector<StepBuffers> res, ref;
  ForwardMetadata m(c), m1(c);

  if (mode == ForwardMode::kIdle) {
    auto before = a.layers[0]->indexer.bytes();
    ForwardBatch idle;
    idle.mode = ForwardMode::kIdle;
    idle.idle_rows_per_request = 4;
    idle.batch_pad = 4;
    DSA_RETURN_IF_ERROR(a.run(idle, {}, &res, &m));
    DSA_RETURN_IF_ERROR(validate_forward_metadata(m, c, a.pages.page_table()));
    for (int32_t r = 0; r < m.header.rows_pad; ++r)
      DSA_RETURN_IF_ERROR(inert_row(res[0], r, "idle row"));
    if (a.layers[0]->indexer.bytes() != before)
      return internal_error("idle step wrote the indexer cache");
    return ok_status();
  }
  if (mode == ForwardMode::kDecode) {  // padded bucket vs unpadded
    DSA_RETURN_IF_ERROR(a.run(batch_of(mode, ra, 0, 1, 8), ra.ids, &res, &m));
    DSA_RETURN_IF_ERROR(validate_forward_metadata(m, c, a.pages.page_table()));
    DSA_RETURN_IF_ERROR(b.run(batch_of(mode, rb, 0, 1), rb.ids, &ref, &m1));
    for (size_t l = 0; l < res.size(); ++l) {
      for (int32_t q = 0; q < 3; ++q)
        DSA_RETURN_IF_ERROR(same_row(res[l], m, q, ref[l], m1, q, ld, "decode row"));
      for (int32_t q = 3; q < 8; ++q)
        DSA_RETURN_IF_ERROR(inert_row(res[l], q, "padded decode row"));
    }
    return ok_status();
  }
  // TARGET_VERIFY, DRAFT_EXTEND and EXTEND against sequential decodes of the same tokens.
  DSA_RETURN_IF_ERROR(a.run(batch_of(mode, ra, 0, new_len), ra.ids, &res, &m));
  DSA_RETURN_IF_ERROR(validate_forward_metadata(m, c, a.pages.page_table()));
  for (int32_t j = 0; j < new_len; ++j) {
    DSA_RETURN_IF_ERROR(b.run(batch_of(ForwardMode::kDecode, rb, j, 1), rb.ids, &ref, &m1));
    for (size_t l = 0; l < res.size(); ++l) {
      for (int32_t q = 0; q < 3; ++q) {
        std::string where = fmt::format("{} layer {} request {} row {}", mode_name(mode), l, q, j);
        DSA_RETURN_IF_ERROR(same_row(res[l], m, m.cu_q[size_t(q)] + j, ref[l], m1, q, ld, where));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::runtime
