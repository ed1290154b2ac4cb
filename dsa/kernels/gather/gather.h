// Gathers (SPEC.md §3h): copy each ragged-path request's keys, position order, out of the paged
// pools into contiguous rows: indexer keys (e4m3 values + fp32 scale, byte for byte, so §3d on
// the gathered keys is the same function as §3b on the pool) and MLA latents (bf16 rows, or
// FP8-656 rows dequantised exactly to bf16). Class E.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

struct IndexerGatherParams {
  const int32_t* req_slot = nullptr;  // [B_pad] int32 page-table row of request b
  const int32_t* cu_kv = nullptr;  // [B_pad + 1] int32: request b fills rows [cu_kv[b], cu_kv[b+1])
  PageTable page_table;            // [R_slots, W] int32 page ids
  IndexerPool pool;                // one layer's indexer keys (§2.2), read only
  int32_t batch_pad = 0;           // B_pad
  uint8_t* k8 = nullptr;           // [capacity, D_i] e4m3 codes out; rows [0, S) written
  float* kscale = nullptr;         // [capacity] fp32 out
  int32_t capacity = 0;            // T_ext_kv: rows allocated at k8 / kscale
};

struct LatentGatherParams {
  const int32_t* req_slot = nullptr;  // [B_pad] int32 page-table row of request b
  const int32_t* cu_kv = nullptr;  // [B_pad + 1] int32: request b fills rows [cu_kv[b], cu_kv[b+1])
  PageTable page_table;            // [R_slots, W] int32 page ids
  LatentPool pool;                 // one layer's MLA latents, bf16 (§2.3) or FP8-656 (§2.4)
  int32_t batch_pad = 0;           // B_pad
  bf16* kv = nullptr;              // [capacity, 576] bf16 out: [c (512) | k_pe (64)]
  int32_t capacity = 0;            // T_ext_kv
};

// Host checks (InvalidArgument): B_pad >= 0, capacity >= 0, pointers, P = 64, D_i = 128 and the
// indexer page stride, num_pages >= 1 and equal to page_table.num_pages, W >= 1, R_slots >= 1.
Status validate(const IndexerGatherParams& p);
Status validate(const LatentGatherParams& p);

// CPU references. S = cu_kv[B_pad]: S > capacity is ResourceExhausted (always). Checked mode
// (OutOfRange, nothing written): cu_kv[0] = 0 and cu_kv non-decreasing; a request's length
// cu_kv[b+1] - cu_kv[b] <= W P; for a non-empty request req_slot in [0, R_slots) and the page ids
// read in [1, num_pages). Unchecked: rows are clamped into [0, S] (a decreasing cu_kv gives an
// empty request), a bad req_slot reads row 0, a page id outside [0, num_pages) and positions at or
// past W P read page 0 (zeros). Rows [S, capacity) are not touched.
Status indexer_gather_ref(const IndexerGatherParams& p);
Status latent_gather_ref(const LatentGatherParams& p);

// CUDA (sm_90a) on cuda::current_stream(); params hold DEVICE pointers (pool.data, k8 and kv
// 16-byte aligned). Bit-exact with the references whenever cu_kv is non-decreasing (in either
// mode). S = cu_kv[B_pad] > capacity sets the device error word to ResourceExhausted in both modes
// and writes nothing (checked mode: the launcher syncs and returns it). Checked mode: the rules of
// the references (OutOfRange) through the error word; outputs are then unspecified. Unchecked:
// the references' neutralisation; a decreasing cu_kv gives deterministic, in-bounds writes to
// rows [0, S) only, not necessarily the reference's.
Status indexer_gather_cuda(const IndexerGatherParams& p);
Status latent_gather_cuda(const LatentGatherParams& p);

}  // namespace dsa::kernels
