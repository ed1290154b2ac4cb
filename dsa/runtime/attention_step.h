// The attention-only step executor (SPEC.md §4.7): for one forward's metadata and one layer, write
// the new rows' MLA latents and indexer keys into both caches, then indexer logits (paged, or
// gather + ragged on EXTEND's ragged path), top-k (paged variant: global slots), sparse MLA. Every
// op goes through the op table, so the same executor runs any backend. Scratch lives in the
// backend's memory, allocated once (first run) at the capacities of the MetadataConfig. Every
// pointer an op reads comes from MetadataArrays (the backend's copies, runtime/metadata_mirror.h);
// the host ForwardMetadata only drives host decisions (header, loop bounds, ragged row lists).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/runtime/buffer.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/metadata_mirror.h"
#include "dsa/runtime/metadata_schedule.h"

namespace dsa::runtime {

struct AttentionDims {
  int32_t index_heads = 16;  // H_i
  int32_t mla_heads = 16;    // H
  float sm_scale = 0.1656269f;
};

struct LayerCaches {
  kernels::IndexerPool indexer;
  kernels::LatentPool latent;
};

// Per-row inputs of one layer, rows [0, rows_pad) of the forward (padded rows are never read for
// anything but their (skipped) writes).
struct AttentionInputs {
  const uint8_t* q_index = nullptr;  // [rows_pad, H_i, 128] e4m3
  const float* w_index = nullptr;    // [rows_pad, H_i] fp32, q scale folded in
  const bf16* k_index = nullptr;     // [rows_pad, 128] bf16 new indexer keys
  const bf16* kv_latent = nullptr;   // [rows_pad, 576] bf16 new latent rows [c | k_pe]
  const bf16* q_mla = nullptr;       // [rows_pad, H, 576] bf16 absorbed queries
  int64_t kv_latent_stride = 0;      // elements between kv_latent's rows; 0 = 576
};

struct AttentionOutputs {
  float* logits = nullptr;  // [rows_pad, logits_ld] fp32: row r's indexer logits (column = pos)
  int32_t* topk = nullptr;  // [rows_pad, K] int32 global slots, -1 padded
  bf16* out = nullptr;      // [rows_pad, H, 512] bf16
  float* lse = nullptr;     // [rows_pad, H] fp32
};

class AttentionStep {
 public:
  AttentionStep(const kernels::OpTable& ops, const MetadataConfig& config, AttentionDims dims);

  // Row stride of every logits buffer: W * P rounded up to 256 (SPEC.md §2.6).
  int64_t logits_ld() const { return logits_ld_; }

  // Host-memory backends: reads meta's arrays and the page table in place.
  Status run_layer(const ForwardMetadata& meta, const kernels::PageTable& page_table,
                   const LayerCaches& caches, const AttentionInputs& in,
                   const AttentionOutputs& out);
  // Any backend: `arrays` are meta's arrays and the page table in the backend's memory.
  Status run_layer(const ForwardMetadata& meta, const MetadataArrays& arrays,
                   const LayerCaches& caches, const AttentionInputs& in,
                   const AttentionOutputs& out);

 private:
  Status allocate_scratch();
  Status write_caches(const ForwardMetadata& m, const MetadataArrays& a, const LayerCaches& c,
                      const AttentionInputs& in);
  Status copy_rows(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                   int64_t row_bytes, const int32_t* index, int32_t rows, int32_t bound,
                   kernels::RowCopyMode mode);
  // Rows of one paged-logits launch: its q/w rows, the schedule's layout, per-request page-table
  // rows, where its logits go, and where its top-k rows go (nullptr = same row).
  struct PagedRows {
    const uint8_t* q;
    const float* w;
    ScheduleLayout layout;
    const int32_t* req_slot;
    float* logits;
    const int32_t* out_row;
  };
  Status paged_indexer(const ForwardMetadata& m, const MetadataArrays& a, const LayerCaches& c,
                       const PagedRows& rows, int32_t* topk);
  Status extend_paged_indexer(const ForwardMetadata& m, const MetadataArrays& a,
                              const LayerCaches& c, const AttentionInputs& in,
                              const AttentionOutputs& out);
  Status extend_ragged_indexer(const ForwardMetadata& m, const MetadataArrays& a,
                               const LayerCaches& c, const AttentionInputs& in,
                               const AttentionOutputs& out);

  const kernels::OpTable& ops_;
  MetadataConfig config_;
  AttentionDims dims_;
  int64_t logits_ld_;
  // Scratch at capacity: EXTEND's paged sub-batch and ragged path.
  bool scratch_ready_ = false;
  Buffer<uint8_t> pg_q_;
  Buffer<float> pg_w_, pg_logits_;
  Buffer<uint8_t> gathered_k8_;
  Buffer<float> gathered_kscale_;
  std::vector<int32_t> ragged_len_, ragged_out_row_;  // built on the host, then uploaded
  Buffer<int32_t> ragged_len_buf_, ragged_out_row_buf_;
  // The decode attention's split-KV partials (CUDA only; empty on the CPU, which never splits).
  Buffer<float> mla_split_ws_;
};

}  // namespace dsa::runtime
