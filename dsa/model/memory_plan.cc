#include "dsa/model/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/kernels/common/paged_cache.h"

namespace dsa::model {

namespace {

double gib(double bytes) { return bytes / double(1ull << 30); }

}  // namespace

size_t cache_page_bytes(int64_t cache_layers, kernels::LatentFormat format) {
  const size_t per_layer =
      size_t(kernels::indexer_page_bytes(kernels::kPageSize, kernels::kIndexHeadDim)) +
      size_t(kernels::kPageSize) * size_t(kernels::latent_bytes_per_token(format));
  return size_t(cache_layers) * per_layer;
}

StatusOr<CachePlan> plan_cache_pages(const CachePlanInput& in, const runtime::MemoryOps& mem) {
  CachePlan plan;
  plan.page_bytes = cache_page_bytes(in.cache_layers, in.latent_format);
  const int64_t needed = int64_t(in.max_requests) * in.page_table_width + 1;
  if (needed > int64_t(INT32_MAX)) {
    return invalid_argument(
        fmt::format("max_requests = {} x {} pages per request: more pages than a page id can name",
                    in.max_requests, in.page_table_width));
  }
  if (in.mem_fraction_static <= 0) {
    plan.num_pages = int32_t(needed);
    return plan;
  }
  DSA_ASSIGN_OR_RETURN(const size_t available, mem.available());
  const size_t placed = in.weight_bytes + in.output_bytes;
  const size_t after_weights = available > placed ? available - placed : 0;
  plan.budget_bytes = size_t(in.mem_fraction_static * double(after_weights));
  const int64_t fit = int64_t(plan.budget_bytes / std::max<size_t>(1, plan.page_bytes));
  const int64_t one_request = int64_t(in.page_table_width) + 1;
  if (fit < one_request) {
    return resource_exhausted(fmt::format(
        "memory budget: --mem-fraction-static {} of {:.2f} GiB available (after {:.2f} GiB of "
        "weights and outputs) is {:.3f} GiB = {} cache pages of {:.1f} KiB; one request of the "
        "whole context needs {} pages ({:.3f} GiB): lower --context-length or raise "
        "--mem-fraction-static",
        in.mem_fraction_static, gib(double(available)), gib(double(placed)),
        gib(double(plan.budget_bytes)), fit, double(plan.page_bytes) / 1024.0, one_request,
        gib(double(one_request) * double(plan.page_bytes))));
  }
  plan.num_pages = int32_t(std::min(needed, fit));
  return plan;
}

}  // namespace dsa::model
