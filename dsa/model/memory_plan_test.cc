// The cache plan: without a budget max_requests full contexts; with one, what fits, never less
// than one whole-context request (refused with the numbers).
#include "dsa/model/memory_plan.h"

#include <gtest/gtest.h>

namespace dsa::model {
namespace {

runtime::MemoryOps with_available(StatusOr<size_t> (*available)()) {
  runtime::MemoryOps m = runtime::memory_ops(kernels::Backend::kCpu);
  m.available = available;
  return m;
}

CachePlanInput input() {
  CachePlanInput in;
  in.cache_layers = 5;
  in.max_requests = 8;
  in.page_table_width = 10;
  return in;
}

TEST(CachePlan, PageBytesCoverEveryLayersIndexerAndLatentPools) {
  // Per layer and page: 64 x (128 + 4) indexer bytes, 64 x 1152 bf16 latent or 64 x 656 FP8.
  EXPECT_EQ(cache_page_bytes(1, kernels::LatentFormat::kBf16), 64u * 132 + 64u * 1152);
  EXPECT_EQ(cache_page_bytes(5, kernels::LatentFormat::kFp8_656), 5u * (64 * 132 + 64 * 656));
}

TEST(CachePlan, WithoutABudgetEveryRequestGetsTheWholeContext) {
  auto plan = plan_cache_pages(input(), runtime::memory_ops(kernels::Backend::kCpu));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_pages, 8 * 10 + 1);
  EXPECT_EQ(plan->budget_bytes, 0u);
}

TEST(CachePlan, ABudgetCapsThePoolAtWhatFits) {
  CachePlanInput in = input();
  in.mem_fraction_static = 0.5;
  const size_t page = cache_page_bytes(in.cache_layers, in.latent_format);
  static size_t available;
  available = 2 * 30 * page + 100;  // half of it: 30 pages
  auto plan = plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return available; }));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_pages, 30);
  available = size_t(1) << 50;  // plenty: no more than needed
  plan = plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return available; }));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_pages, 81);
  // Weights still to be uploaded come off the top.
  in.weight_bytes = available - 2 * 20 * page;
  plan = plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return available; }));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_pages, 20);
}

TEST(CachePlan, ABudgetBelowOneRequestIsRefusedWithTheNumbers) {
  CachePlanInput in = input();
  in.mem_fraction_static = 0.9;
  auto plan = plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return 1 << 20; }));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("needs 11 pages"), std::string::npos)
      << plan.status().to_string();
  EXPECT_NE(plan.status().message().find("--mem-fraction-static 0.9"), std::string::npos);
  in.max_requests = 1 << 30;
  in.mem_fraction_static = 0;
  EXPECT_EQ(plan_cache_pages(in, runtime::memory_ops(kernels::Backend::kCpu)).status().code(),
            StatusCode::kInvalidArgument);
}

// Weights (and outputs) that do not fit in what is available are refused before anything is
// read, with the weight, output, needed and available bytes.
TEST(CachePlan, WeightsLargerThanTheAvailableMemoryAreRefusedWithTheNumbers) {
  CachePlanInput in = input();
  in.mem_fraction_static = 0.9;
  in.weight_bytes = 5000000;
  in.output_bytes = 1000;
  auto plan = plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return 4000000; }));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  const std::string& msg = plan.status().message();
  for (const char* number : {"5000000 bytes", "1000 bytes", "5001000 bytes", "4000000 bytes"}) {
    EXPECT_NE(msg.find(number), std::string::npos) << number << " in " << msg;
  }
  // Exactly as much as the weights and outputs leaves no room for a cache: refused too.
  in.weight_bytes = 4000000 - 1000;
  EXPECT_EQ(plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return 4000000; }))
                .status()
                .code(),
            StatusCode::kResourceExhausted);
}

// The plan keeps the numbers it was made from, and its description prints them.
TEST(CachePlan, RecordsAndDescribesTheBudget) {
  CachePlanInput in = input();
  in.mem_fraction_static = 0.5;
  const size_t page = cache_page_bytes(in.cache_layers, in.latent_format);
  static size_t available;
  in.weight_bytes = 1 << 20;
  in.output_bytes = 1 << 10;
  available = in.weight_bytes + in.output_bytes + 2 * 41 * page;  // half: 41 pages
  auto plan = plan_cache_pages(in, with_available([]() -> StatusOr<size_t> { return available; }));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_pages, 41);
  EXPECT_EQ(plan->available_bytes, available);
  EXPECT_EQ(plan->weight_bytes, size_t(1) << 20);
  EXPECT_EQ(plan->output_bytes, size_t(1) << 10);
  EXPECT_EQ(plan->tokens(), 40 * kernels::kPageSize);
  EXPECT_EQ(plan->whole_context_requests(), 4);  // 40 pages / 10 per request
  const std::string d = describe_cache_plan(*plan);
  EXPECT_NE(d.find("41 pages"), std::string::npos) << d;
  EXPECT_NE(d.find("2560 tokens"), std::string::npos) << d;
  EXPECT_NE(d.find("4 whole-context requests"), std::string::npos) << d;
  EXPECT_NE(d.find("--mem-fraction-static 0.5"), std::string::npos) << d;
}

}  // namespace
}  // namespace dsa::model
