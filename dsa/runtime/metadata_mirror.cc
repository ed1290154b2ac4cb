#include "dsa/runtime/metadata_mirror.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "dsa/runtime/metadata_schedule.h"
#include "dsa/runtime/metadata_validator.h"

namespace dsa::runtime {

namespace {

// How much of a field one forward uses: what the builder writes for it (metadata_builder.cc).
// Kernels read no further (a graph's launches are fixed at its rows_pad, B_pad and sample count),
// so upload() copies only this much; the rest of the backend's field keeps older values.
enum class Extent {
  kRows,      // [rows_pad]
  kSamples,   // [max(rows_pad, num_samples)]: sample_row, which the head reads to num_samples
  kRequests,  // [B_pad]
  kRequestsPlusOne,  // [B_pad + 1]: prefix sums
  kPagedRequests,    // [paged_requests]: EXTEND's paged sub-batch
  kPagedRows,        // [paged_requests x paged_rows_per_req]
  kRebuilt,          // the schedule: rebuilt by the forward's first node (inv. 15), not copied
};

struct Field {
  std::vector<int32_t> ForwardMetadata::*host;
  const int32_t* MetadataArrays::*view;
  Extent extent;
};
constexpr Field kFields[] = {
    {&ForwardMetadata::row_len, &MetadataArrays::row_len, Extent::kRows},
    {&ForwardMetadata::row_topk_len, &MetadataArrays::row_topk_len, Extent::kRows},
    {&ForwardMetadata::row_req, &MetadataArrays::row_req, Extent::kRows},
    {&ForwardMetadata::row_page, &MetadataArrays::row_page, Extent::kRows},
    {&ForwardMetadata::positions, &MetadataArrays::positions, Extent::kRows},
    {&ForwardMetadata::write_slot, &MetadataArrays::write_slot, Extent::kRows},
    {&ForwardMetadata::ks, &MetadataArrays::ks, Extent::kRows},
    {&ForwardMetadata::ke, &MetadataArrays::ke, Extent::kRows},
    {&ForwardMetadata::sample_row, &MetadataArrays::sample_row, Extent::kSamples},
    {&ForwardMetadata::req_slot, &MetadataArrays::req_slot, Extent::kRequests},
    {&ForwardMetadata::req_kv_len, &MetadataArrays::req_kv_len, Extent::kRequests},
    {&ForwardMetadata::cu_q, &MetadataArrays::cu_q, Extent::kRequestsPlusOne},
    {&ForwardMetadata::cu_kv, &MetadataArrays::cu_kv, Extent::kRequestsPlusOne},
    {&ForwardMetadata::pg_req_slot, &MetadataArrays::pg_req_slot, Extent::kPagedRequests},
    {&ForwardMetadata::pg_row_len, &MetadataArrays::pg_row_len, Extent::kPagedRows},
    {&ForwardMetadata::pg_row, &MetadataArrays::pg_row, Extent::kPagedRows},
    {&ForwardMetadata::schedule, &MetadataArrays::schedule, Extent::kRebuilt},
};

// The words of `f` that `m` uses, bounded by the field's capacity.
size_t used_words(const ForwardMetadata& m, const Field& f) {
  const MetadataHeader& h = m.header;
  int64_t n = 0;
  switch (f.extent) {
    case Extent::kRows:
      n = h.rows_pad;
      break;
    case Extent::kSamples:
      n = std::max(h.rows_pad, h.num_samples);
      break;
    case Extent::kRequests:
      n = h.batch_pad;
      break;
    case Extent::kRequestsPlusOne:
      n = int64_t{h.batch_pad} + 1;
      break;
    case Extent::kPagedRequests:
      n = h.paged_requests;
      break;
    case Extent::kPagedRows:
      n = int64_t{h.paged_requests} * h.paged_rows_per_req;
      break;
    case Extent::kRebuilt:
      n = 0;
      break;
  }
  return size_t(std::clamp<int64_t>(n, 0, int64_t((m.*f.host).size())));
}

size_t page_table_size(const kernels::PageTable& pt) { return size_t(pt.num_rows) * pt.width; }
// A row version no table has (PagedCacheManager counts from 0 up): the first upload copies all.
constexpr uint64_t kNeverCopied = ~uint64_t{0};
size_t words_for_bf16(int64_t count) { return size_t((count + 1) / 2); }

// One slot per forward of two speculative steps (the verify, the draft extend and the d - 1 draft
// decodes each): with the step commit nothing is read inside a step, and with the overlap a step's
// uploads are known read only once the step after it has been launched. At least two (d = 0).
int32_t ring_slots(const MetadataConfig& c) { return 2 * (c.num_draft_tokens + 1); }

}  // namespace

MetadataArrays host_arrays(const ForwardMetadata& m, const kernels::PageTable& pt) {
  MetadataArrays a;
  for (const Field& f : kFields) a.*f.view = (m.*f.host).data();
  a.page_table = pt;
  return a;
}

MetadataMirror::MetadataMirror(kernels::Backend backend, const MetadataConfig& config,
                               int64_t hidden_size)
    : backend_(backend), config_(config), hidden_size_(hidden_size), slots_(ring_slots(config)) {}

MetadataMirror::~MetadataMirror() {
  for (void* p : staging_) memory_ops(backend_).release_staging(p);
}

Status MetadataMirror::allocate(const kernels::PageTable& pt) {
  if (!staging_.empty()) return ok_status();
  const ForwardMetadata shape(config_);  // field capacities
  const size_t rows = size_t(config_.row_capacity());
  size_t offset = 0;
  for (const Field& f : kFields) offset += (shape.*f.host).size();
  offset += rows;  // tokens
  offset += rows;  // hidden_rows
  offset += rows;  // token_rows
  fixed_words_ = offset;
  total_words_ = fixed_words_ + words_for_bf16(int64_t(rows) * hidden_size_);
  table_words_ = page_table_size(pt);
  synced_.assign(size_t(pt.num_rows), kNeverCopied);
  const MemoryOps& mem = memory_ops(backend_);
  for (int32_t i = 0; i < slots_; ++i) {
    // The fixed part (slot 0: and the host hidden rows), then room for every row of the table.
    const size_t words = (i == 0 ? total_words_ : fixed_words_) + table_words_;
    DSA_ASSIGN_OR_RETURN(void* p, mem.alloc_staging(words * sizeof(int32_t)));
    staging_.push_back(p);
    slot_upload_.push_back(-1);  // never read by a copy
    std::memset(p, 0, words * sizeof(int32_t));
  }
  DSA_ASSIGN_OR_RETURN(block_, Buffer<int32_t>::alloc(backend_, total_words_ + table_words_));
  // The layout, fixed from here on.
  offset = 0;
  for (const Field& f : kFields) {
    arrays_.*f.view = block_.data() + offset;
    offset += (shape.*f.host).size();
  }
  schedule_ = const_cast<int32_t*>(arrays_.schedule);
  tokens_ = block_.data() + offset;
  offset += rows;
  hidden_rows_ = block_.data() + offset;
  offset += rows;
  token_rows_ = block_.data() + offset;
  offset += rows;
  hidden_ = reinterpret_cast<const bf16*>(block_.data() + offset);
  // The page table last, outside the range upload() copies whole: only changed rows reach it.
  arrays_.page_table = pt;
  arrays_.page_table.data = block_.data() + total_words_;
  return ok_status();
}

Status MetadataMirror::upload(const ForwardMetadata& m, const PagedCacheManager& pages,
                              std::span<const int32_t> tokens, std::span<const bf16> hidden,
                              std::span<const int32_t> hidden_rows,
                              std::span<const int32_t> token_rows) {
  const kernels::PageTable pt = pages.page_table();
  DSA_RETURN_IF_ERROR(allocate(pt));
  const int64_t rows = m.header.rows_pad;
  if (int64_t(tokens.size()) < rows) {
    return invalid_argument(fmt::format("forward: {} token ids for {} rows", tokens.size(), rows));
  }
  if (!hidden.empty() && int64_t(hidden.size()) < rows * hidden_size_) {
    return invalid_argument(fmt::format("forward: {} hidden values for {} rows of {}",
                                        hidden.size(), rows, hidden_size_));
  }
  if (int64_t(hidden_rows.size()) > rows) {
    return invalid_argument(
        fmt::format("forward: {} hidden row indices for {} rows", hidden_rows.size(), rows));
  }
  if (int64_t(token_rows.size()) > rows) {
    return invalid_argument(
        fmt::format("forward: {} token row indices for {} rows", token_rows.size(), rows));
  }
  if (page_table_size(pt) != page_table_size(arrays_.page_table)) {
    return invalid_argument("metadata mirror: the page table's shape changed");
  }
  // The ring (header comment): wait only when the slot this upload needs may still be read.
  const size_t slot = hidden.empty() ? size_t(next_slot_) : 0;
  if (slot_upload_[slot] >= int64_t(completed_)) {
    DSA_RETURN_IF_ERROR(memory_ops(backend_).sync());
    completed_ = uploads_;
    ++ring_waits_;
  }
  int32_t* s = static_cast<int32_t*>(staging_[slot]);
  slot_upload_[slot] = int64_t(uploads_++);
  next_slot_ = int32_t((slot + 1) % size_t(slots_));
  // Each region's used part only (Field::extent): at a decode a few hundred bytes of a block laid
  // out at capacity (~50 KB for the tiny model, 12 row regions of rows_cap).
  runs_.clear();
  size_t offset = 0, words = 0;
  // Poisoned (set_poison): the rest of the region too, as kMirrorPoisonWord.
  const auto stage = [&](const int32_t* from, size_t used, size_t capacity) {
    const size_t copied = poison_ ? capacity : used;
    if (copied > 0) {
      std::memcpy(s + offset, from, used * sizeof(int32_t));
      std::fill(s + offset + used, s + offset + copied, kMirrorPoisonWord);
      runs_.push_back({uint32_t(offset), uint32_t(copied)});
      words += copied;
    }
    offset += capacity;
  };
  for (const Field& f : kFields) {
    const std::vector<int32_t>& v = m.*f.host;
    stage(v.data(), used_words(m, f), v.size());
  }
  const size_t cap = size_t(config_.row_capacity());
  stage(tokens.data(), size_t(rows), cap);
  // The hand-off's row lists: the given entries, -1 for the rest of the forward's rows.
  for (std::span<const int32_t> list : {hidden_rows, token_rows}) {
    std::copy(list.begin(), list.end(), s + offset);
    std::fill(s + offset + list.size(), s + offset + size_t(rows), -1);
    const size_t copied = poison_ ? cap : size_t(rows);
    std::fill(s + offset + size_t(rows), s + offset + copied, kMirrorPoisonWord);
    if (copied > 0) runs_.push_back({uint32_t(offset), uint32_t(copied)});
    words += copied;
    offset += cap;
  }
  size_t bytes = words * sizeof(int32_t);
  // The one copy of the step's inputs, then the rows of the page table changed since the last
  // upload (SPEC.md §6.7's patch list): one copy per run of consecutive changed rows, none in a
  // step that opened, grew or closed no request. Stream order puts them after every forward
  // launched before, which read the rows as they were.
  const MemoryOps& mem = memory_ops(backend_);
  DSA_RETURN_IF_ERROR(mem.copy_runs(block_.data(), s, runs_.data(), runs_.size()));
  if (!hidden.empty()) {
    const size_t hb = size_t(rows * hidden_size_) * sizeof(bf16);
    std::memcpy(s + fixed_words_, hidden.data(), hb);
    DSA_RETURN_IF_ERROR(mem.copy(block_.data() + fixed_words_, s + fixed_words_, hb));
    bytes += hb;
  }
  staged_bytes_ += int64_t(bytes);
  int32_t* patch = s + (slot == 0 ? total_words_ : fixed_words_);
  // Versions are per manager: another one (a test's) starts from a whole copy.
  if (synced_from_ != &pages) std::fill(synced_.begin(), synced_.end(), kNeverCopied);
  synced_from_ = &pages;
  const std::span<const uint64_t> versions = pages.row_versions();
  const size_t W = size_t(pt.width);
  int32_t* table = block_.data() + total_words_;
  for (size_t r = 0; r < synced_.size();) {
    if (synced_[r] == versions[r]) {
      ++r;
      continue;
    }
    size_t end = r;
    while (end < synced_.size() && synced_[end] != versions[end]) ++end;
    const size_t words = (end - r) * W;
    std::memcpy(patch, pt.data + r * W, words * sizeof(int32_t));
    DSA_RETURN_IF_ERROR(mem.copy(table + r * W, patch, words * sizeof(int32_t)));
    // Only once the copy is issued: a failed copy leaves the rows to copy again.
    std::copy(versions.begin() + long(r), versions.begin() + long(end), synced_.begin() + long(r));
    patch += words;
    staged_bytes_ += int64_t(words * sizeof(int32_t));
    ++table_patches_;
    r = end;
  }
  return ok_status();
}

Status MetadataMirror::rebuild_schedule(const kernels::OpTable& ops,
                                        const ForwardMetadata& m) const {
  const ScheduleLayout layout = schedule_layout(m);
  kernels::LogitsScheduleParams p;
  p.row_len = is_uniform(m.header.mode) ? arrays_.row_len : arrays_.pg_row_len;
  p.batch_pad = layout.batch;
  p.rows_per_request = layout.rows_per_request;
  p.num_consumers = config_.num_consumers;
  p.page_table_width = config_.page_table_width;
  p.schedule = schedule_;
  p.schedule_capacity = static_cast<int32_t>(m.schedule.size());
  return ops.build_logits_schedule(p);
}

Status MetadataMirror::validate_uploaded(const ForwardMetadata& m, const PagedCacheManager& pages,
                                         ForwardMetadata* out) const {
  const MemoryOps& mem = memory_ops(backend_);
  for (const Field& f : kFields) {
    // The used part as the backend holds it; past it the host build's, since the backend's is an
    // older forward's (or, poisoned, kMirrorPoisonWord) and no op reads it.
    std::vector<int32_t>& v = out->*f.host;
    v = m.*f.host;
    DSA_RETURN_IF_ERROR(mem.copy(v.data(), arrays_.*f.view, used_words(m, f) * sizeof(int32_t)));
  }
  DSA_RETURN_IF_ERROR(mem.sync());
  out->header = m.header;
  DSA_RETURN_IF_ERROR(build_metadata_schedule(config_, *out));
  return validate_forward_metadata(*out, config_, pages.page_table())
      .with_context("metadata patched on the device");
}

Status MetadataMirror::commit_step(const kernels::OpTable& ops, const ForwardMetadata& m,
                                   kernels::StepCommitTarget target, const int32_t* accepted,
                                   const int32_t* emitted, const int32_t* shift_accepted,
                                   const int32_t* shift_emitted, int32_t d, bool hidden_rows,
                                   const CommitTokens& tokens) const {
  using kernels::StepCommitTarget;
  const ForwardMode want = target == StepCommitTarget::kDraftExtend ? ForwardMode::kDraftExtend
                           : target == StepCommitTarget::kVerify    ? ForwardMode::kTargetVerify
                                                                    : ForwardMode::kDecode;
  const int32_t n = want == ForwardMode::kDecode ? 1 : d + 1;
  if (m.header.mode != want || m.header.rows_per_request != n) {
    return invalid_argument(
        fmt::format("step commit: the forward is {} with n = {}; the patch needs {} with n = {}",
                    mode_name(m.header.mode), m.header.rows_per_request, mode_name(want), n));
  }
  // The regions are the mirror's own (upload() wrote them); the op writes them in place.
  const auto w = [](const int32_t* p) { return const_cast<int32_t*>(p); };
  kernels::StepCommitParams p;
  p.target = target;
  p.accepted = accepted;
  p.emitted = emitted;
  p.shift_accepted = shift_accepted;
  p.shift_emitted = shift_emitted;
  p.requests = m.header.num_requests;
  p.drafts_per_request = d;
  p.tokens = w(tokens_);
  p.token_rows = w(token_rows_);
  p.sample_row = w(arrays_.sample_row);
  p.rows = {w(arrays_.row_len),   w(arrays_.row_topk_len), w(arrays_.row_req), w(arrays_.row_page),
            w(arrays_.positions), w(arrays_.write_slot),   w(arrays_.ks),      w(arrays_.ke)};
  p.req_kv_len = w(arrays_.req_kv_len);
  p.req_slot = arrays_.req_slot;
  p.hidden_rows = hidden_rows ? w(hidden_rows_) : nullptr;
  p.page_table = arrays_.page_table;
  p.topk = m.header.topk;
  p.kept_tokens = tokens.kept;
  p.kept_count = tokens.kept_count;
  p.draft_tokens = tokens.drafts;
  p.vocab = tokens.vocab;
  return ops.step_commit(p);
}

}  // namespace dsa::runtime
