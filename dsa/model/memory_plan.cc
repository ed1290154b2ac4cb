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

std::string describe_cache_plan(const CachePlan& p) {
  std::string s = fmt::format(
      "KV cache: {} pages of {:.1f} KiB ({} tokens, {:.2f} GiB; {} whole-context requests of {} "
      "pages)",
      p.num_pages, double(p.page_bytes) / 1024.0, p.tokens(), gib(double(p.pool_bytes())),
      p.whole_context_requests(), p.page_table_width);
  if (p.budget_bytes == 0) return s + " (no memory budget: every request's whole context)";
  return s + fmt::format(
                 " within --mem-fraction-static {} x ({:.2f} GiB available - {:.2f} GiB weights - "
                 "{:.2f} GiB outputs) = {:.2f} GiB",
                 p.mem_fraction_static, gib(double(p.available_bytes)), gib(double(p.weight_bytes)),
                 gib(double(p.output_bytes)), gib(double(p.budget_bytes)));
}

StatusOr<CachePlan> plan_cache_pages(const CachePlanInput& in, const runtime::MemoryOps& mem) {
  CachePlan plan;
  plan.page_bytes = cache_page_bytes(in.cache_layers, in.latent_format);
  plan.page_table_width = in.page_table_width;
  plan.weight_bytes = in.weight_bytes;
  plan.output_bytes = in.output_bytes;
  plan.mem_fraction_static = in.mem_fraction_static;
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
  plan.available_bytes = available;
  const size_t placed = in.weight_bytes + in.output_bytes;
  if (placed >= available) {
    return resource_exhausted(fmt::format(
        "memory: the weights ({} bytes = {:.2f} GiB) and output buffers ({} bytes = {:.2f} GiB) "
        "need {} bytes ({:.2f} GiB), more than the {} bytes ({:.2f} GiB) available: the model "
        "cannot be loaded here (fewer layers, FP8 weights, a smaller --max-prefill-tokens, or more "
        "memory)",
        in.weight_bytes, gib(double(in.weight_bytes)), in.output_bytes,
        gib(double(in.output_bytes)), placed, gib(double(placed)), available,
        gib(double(available))));
  }
  const size_t after_weights = available - placed;
  plan.budget_bytes = size_t(in.mem_fraction_static * double(after_weights));
  const int64_t fit = int64_t(plan.budget_bytes / std::max<size_t>(1, plan.page_bytes));
  const int64_t one_request = int64_t(in.page_table_width) + 1;
  if (fit < one_request) {
    return resource_exhausted(fmt::format(
        "memory budget: --mem-fraction-static {} of {:.2f} GiB available (after {:.2f} GiB of "
        "weights and outputs) is {:.3f} GiB = {} cache pages of {:.1f} KiB; one request of the "
        "whole context needs {} pages ({} bytes = {:.3f} GiB): lower --context-length or raise "
        "--mem-fraction-static",
        in.mem_fraction_static, gib(double(available)), gib(double(placed)),
        gib(double(plan.budget_bytes)), fit, double(plan.page_bytes) / 1024.0, one_request,
        size_t(one_request) * plan.page_bytes, gib(double(one_request) * double(plan.page_bytes))));
  }
  plan.num_pages = int32_t(std::min(needed, fit));
  return plan;
}

}  // namespace dsa::model
