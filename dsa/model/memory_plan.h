// How many cache pages a model gets (SPEC.md §2.5). Without a budget: max_requests requests of the
// whole context (plus page 0). With one (ModelOptions::mem_fraction_static, SGLang's
// --mem-fraction-static): the caches of every layer may take that fraction of the memory still
// available once the weights and the output buffers are placed (host: the smaller of MemAvailable
// and the cgroup's memory.max headroom; CUDA: free device memory), so a large context or batch is
// served from what fits, not reserved for the largest conceivable load. The rest of the fraction's
// complement is headroom for activations, workspaces and graphs. Unlike SGLang's flag of that name
// (a fraction of the total memory for weights and caches together) it is a fraction of what is
// left after the weights. Refused with the numbers, before any weight is read: weights and outputs
// larger than the available memory, and a budget that cannot hold one request of the whole
// context.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/runtime/backend_memory.h"

namespace dsa::model {

struct CachePlanInput {
  int64_t cache_layers = 0;  // target layers + the MTP layer
  kernels::LatentFormat latent_format = kernels::LatentFormat::kBf16;
  int32_t max_requests = 1;
  int32_t page_table_width = 1;    // W: pages one request may hold
  double mem_fraction_static = 0;  // 0 = no budget
  size_t weight_bytes = 0;         // the checkpoint, still to be read into the backend's memory
  size_t output_bytes = 0;  // the forward's fixed output buffers (hidden, logits at capacity)
};

struct CachePlan {
  int32_t num_pages = 0;    // including page 0
  size_t page_bytes = 0;    // one page in every layer's indexer and latent pools
  size_t budget_bytes = 0;  // 0 without a budget
  // What the budget was taken from (with one): the memory available, and what is placed first.
  size_t available_bytes = 0, weight_bytes = 0, output_bytes = 0;
  double mem_fraction_static = 0;
  int32_t page_table_width = 0;  // pages of one whole-context request

  size_t pool_bytes() const { return size_t(num_pages) * page_bytes; }
  // Tokens the pool holds for requests (page 0 is reserved).
  int64_t tokens() const { return int64_t(std::max(0, num_pages - 1)) * kernels::kPageSize; }
  // Whole-context requests that fit at once.
  int64_t whole_context_requests() const {
    return page_table_width > 0 ? (num_pages - 1) / page_table_width : 0;
  }
};

// One line for the load log: "KV cache: 1235 pages (78976 tokens, 2.31 GiB; 16 whole-context
// requests) = 0.9 x (120.00 GiB available - 40.10 GiB weights - 0.50 GiB outputs)".
std::string describe_cache_plan(const CachePlan& plan);

// Bytes of one page across every layer's indexer and latent pools.
size_t cache_page_bytes(int64_t cache_layers, kernels::LatentFormat format);

// ResourceExhausted when the budget holds fewer than page_table_width + 1 pages.
StatusOr<CachePlan> plan_cache_pages(const CachePlanInput& in, const runtime::MemoryOps& mem);

}  // namespace dsa::model
