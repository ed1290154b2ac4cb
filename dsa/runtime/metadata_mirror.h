// One forward's inputs where the backend's ops read them (SPEC.md §5, replay step 1): the
// metadata arrays (§4.4), the page table, the token ids and, for the MTP layer, the hidden rows.
// The host builder stays the one writer (ForwardMetadata); upload() packs the part of each region
// the forward uses (its rows_pad rows, B_pad requests, paged sub-batch: what the builder wrote,
// all that kernels read) into one staging block (page-locked for CUDA) and issues ONE
// asynchronous copy of those runs (MemoryOps::copy_runs; on CUDA one kernel) into a backend block
// whose layout is fixed when the mirror is created, from the MetadataConfig's capacities. Past
// the used part a region keeps older values, which nothing reads. The page table
// is not in that copy: the backend's copy of it lives after the block's other regions and only
// the rows the page manager changed since the last upload are copied into it (one copy per run of
// consecutive rows; SPEC.md §6.7's patch list), so a step that admits or retires nothing moves no
// page-table byte, where a whole-table copy moved R_slots x W words per forward. So every
// address a captured graph holds stays valid, and per-step values reach kernels only through these
// buffers (inv. 18). The schedule region is rebuilt by the forward itself, on the backend, from
// the very row_len it reads (rebuild_schedule, inv. 15).
//
// Back-to-back forwards (a draft chain launched without reading anything back between its
// forwards). The backend block is one: forward k + 1's copy into it is issued on the same stream
// after forward k's launches, so it runs after forward k has read it (stream order; a graph
// replay is ordered the same way). The page-locked staging block is different: the copy reads it
// when the stream reaches the copy, not when upload() returns, so writing forward k + 1's inputs
// into the block forward k's copy has not read yet would corrupt forward k. Hence a ring of
// staging slots taken in turn: a slot is never written while a copy from it may still be pending,
// which the owner tells the mirror by synchronised() (the stream is drained) or completed() (the
// overlapped decode waited for a point after some uploads only). When the next slot is pending
// upload() synchronises the stream itself first (correct, only slower), so the ring's size bounds
// the forwards in flight, never correctness. Host hidden rows (the MTP input of the host
// hand-off, up to row_capacity rows) are staged only in slot 0, the one slot sized for them: an
// upload that has them synchronises first unless nothing is pending.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/op_table.h"
#include "dsa/runtime/backend_memory.h"
#include "dsa/runtime/buffer.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/page_pool.h"

namespace dsa::runtime {

struct MetadataArrays {
  const int32_t *row_len = nullptr, *row_topk_len = nullptr, *row_req = nullptr,
                *row_page = nullptr, *positions = nullptr, *write_slot = nullptr, *ks = nullptr,
                *ke = nullptr, *sample_row = nullptr;
  const int32_t *req_slot = nullptr, *req_kv_len = nullptr, *cu_q = nullptr, *cu_kv = nullptr;
  const int32_t *pg_req_slot = nullptr, *pg_row_len = nullptr, *pg_row = nullptr;
  const int32_t* schedule = nullptr;
  kernels::PageTable page_table;
};

// The arrays of `m` and `pt` in place (host memory).
MetadataArrays host_arrays(const ForwardMetadata& m, const kernels::PageTable& pt);

// The token gather that follows a step commit, run by the commit's own launch (step_commit.h's
// kept_tokens / draft_tokens; backend memory): the kept tokens the mirror's token_rows name (the
// verify, the draft extend), or a draft slot's entries (a draft decode).
struct CommitTokens {
  const int32_t* kept = nullptr;
  int32_t kept_count = 0;
  const int32_t* drafts = nullptr;
  int32_t vocab = 0;
};

// The word set_poison() leaves past each region's used part: as an index, length or position it is
// out of every range (a large negative number), not a sentinel such as -1 that readers skip.
inline constexpr int32_t kMirrorPoisonWord = int32_t(0xA5A5A5A5u);

class MetadataMirror {
 public:
  // hidden_size: row width of the MTP hidden input (0 = none).
  MetadataMirror(kernels::Backend backend, const MetadataConfig& config, int64_t hidden_size);
  MetadataMirror(const MetadataMirror&) = delete;
  MetadataMirror& operator=(const MetadataMirror&) = delete;
  ~MetadataMirror();

  // Allocates the staging and backend blocks (once, before the first upload).
  Status allocate(const kernels::PageTable& pt);
  // tokens: >= rows_pad ids; hidden: empty, or >= rows_pad rows of hidden_size; hidden_rows:
  // empty, or <= rows_pad entries staged into hidden_rows() (the rest -1), the model's row list
  // for an MTP forward's hidden rows gathered on the backend (SPEC.md §6.7 hand-off); token_rows:
  // the same for its token ids (token_rows(): sampled tokens or drafts kept in backend memory).
  // The page table is `pages`'s: its rows changed since the last upload (their versions) are
  // copied after the step's block, each run of consecutive rows in one copy; the rest stays.
  Status upload(const ForwardMetadata& m, const PagedCacheManager& pages,
                std::span<const int32_t> tokens, std::span<const bf16> hidden = {},
                std::span<const int32_t> hidden_rows = {},
                std::span<const int32_t> token_rows = {});
  // Tests (ModelOptions::poison_workspace): every upload also writes kMirrorPoisonWord past the
  // used part of each metadata region, token region and row list (those regions are copied
  // whole; the host hidden rows and the page table are not poisoned), so a forward equals its
  // unpoisoned twin only if no backend op reads a region past what the forward uses.
  // staged_bytes() then counts the poison too.
  void set_poison(bool on) { poison_ = on; }

  // The owner has synchronised the stream: every copy from the staging ring has completed.
  void synchronised() { completed_ = uploads_; }
  // Uploads so far, and: the first `count` of them have been read by the backend (the owner waited
  // for a point of the stream after their copies, without synchronising all of it: the overlapped
  // decode frees the slots of step N while step N + 1's copy may still be pending).
  uint64_t uploads() const { return uploads_; }
  void completed(uint64_t count) { completed_ = std::max(completed_, std::min(count, uploads_)); }
  // Times upload() synchronised the stream because the ring was full or host hidden rows had to
  // wait for slot 0 (tests; 0 in a draft chain of at most staging_slots() forwards).
  int64_t ring_waits() const { return ring_waits_; }
  int32_t staging_slots() const { return slots_; }
  // Bytes upload() has copied to the backend, and copies of changed page-table rows (one per run
  // of consecutive rows): what the patch list saves against copying the whole table each forward.
  int64_t staged_bytes() const { return staged_bytes_; }
  int64_t table_patches() const { return table_patches_; }
  // §3c on the backend over the uploaded row_len (pg_row_len for EXTEND) into the schedule region.
  Status rebuild_schedule(const kernels::OpTable& ops, const ForwardMetadata& m) const;
  // The step commit (kernels/step_commit, SPEC.md §6.7) over the uploaded regions of `m`, built at
  // a = 0: after upload()'s copy and before anything reads them (the hand-off gathers, the body).
  // accepted [B] and emitted [B, d + 1]: the acceptance op's outputs in backend memory, for the
  // forward's B = m.header.num_requests real requests in order. kDraftExtend patches the tokens,
  // token_rows and sample_row; kChainDecode the rows and req_kv_len, and the hidden rows when
  // `hidden_rows` (the first draft decode, whose hidden states are the draft extend's rows).
  // kVerify (a TARGET_VERIFY) reads no counts of its own, only the shift. shift_accepted /
  // shift_emitted (or null): the previous, unread step's counts, for the same requests in order.
  // `tokens` (CommitTokens): the token gather the same launch runs after the patch, if any.
  // Checked mode (SPEC.md §4.6): the forward's metadata as the backend holds it after
  // commit_step, its used part read back (a synchronising copy; the rest is `m`'s) into `out`
  // (built for the same config) with `m`'s header, its schedule rebuilt on the host from the
  // patched lengths, and validated against every invariant the host build is checked for
  // (FailedPrecondition naming the invariant).
  Status validate_uploaded(const ForwardMetadata& m, const PagedCacheManager& pages,
                           ForwardMetadata* out) const;
  Status commit_step(const kernels::OpTable& ops, const ForwardMetadata& m,
                     kernels::StepCommitTarget target, const int32_t* accepted,
                     const int32_t* emitted, const int32_t* shift_accepted,
                     const int32_t* shift_emitted, int32_t d, bool hidden_rows,
                     const CommitTokens& tokens = {}) const;

  const MetadataArrays& arrays() const { return arrays_; }
  const int32_t* tokens() const { return tokens_; }
  const bf16* hidden() const { return hidden_; }
  const int32_t* hidden_rows() const { return hidden_rows_; }
  const int32_t* token_rows() const { return token_rows_; }
  // The token region for the backend ops that fill it after the copy (the hand-off gathers).
  int32_t* mutable_tokens() const { return const_cast<int32_t*>(tokens_); }

 private:
  kernels::Backend backend_;
  MetadataConfig config_;
  int64_t hidden_size_;
  size_t fixed_words_ = 0;     // metadata fields + tokens + hidden_rows + token_rows, at capacity
  size_t total_words_ = 0;     // + hidden rows at capacity
  size_t table_words_ = 0;     // the page table: after total_words_ in the backend block
  std::vector<WordRun> runs_;  // upload()'s copy: the used part of each region
  std::vector<uint64_t> synced_;  // per page-table row, the version the backend block holds
  const PagedCacheManager* synced_from_ = nullptr;  // whose versions synced_ holds
  int64_t staged_bytes_ = 0, table_patches_ = 0;
  // The staging ring (host): slot 0 holds total_words_ int32, slots 1.. fixed_words_ each, and
  // each then the changed page-table rows of its upload (room for the whole table).
  int32_t slots_ = 1;
  std::vector<void*> staging_;
  // Slots are taken in turn (host hidden rows: always slot 0). Slot i last held upload
  // slot_upload_[i] (-1: none); uploads before completed_ have been read, so slot i is free once
  // slot_upload_[i] < completed_.
  std::vector<int64_t> slot_upload_;
  int32_t next_slot_ = 0;
  uint64_t uploads_ = 0, completed_ = 0;
  int64_t ring_waits_ = 0;
  bool poison_ = false;
  Buffer<int32_t> block_;
  MetadataArrays arrays_;
  int32_t* schedule_ = nullptr;
  const int32_t* tokens_ = nullptr;
  const int32_t* hidden_rows_ = nullptr;
  const int32_t* token_rows_ = nullptr;
  const bf16* hidden_ = nullptr;
};

}  // namespace dsa::runtime
