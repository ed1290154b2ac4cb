// A small world for runtime tests: a config, a page manager, and random request generation.
#pragma once

#include <random>
#include <vector>

#include "dsa/core/check.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/page_pool.h"

namespace dsa::runtime::testing {

inline MetadataConfig small_config(int32_t d = 3) {
  MetadataConfig c;
  c.num_draft_tokens = d;
  c.topk = 128;
  c.page_table_width = 40;
  c.num_consumers = 8;
  c.max_requests = 24;
  c.max_extend_rows = 1024;
  c.max_extend_kv = 8192;
  c.num_rows = 40;
  c.num_pages = 600;
  return c;
}

struct World {
  MetadataConfig config;
  PagedCacheManager pages;
  explicit World(const MetadataConfig& c)
      : config(c), pages(c.num_pages, c.num_rows, c.page_table_width) {}

  // Opens a request and reserves pages for kv_len tokens.
  RequestInput request(int32_t cached_len, int32_t new_len) {
    RequestInput q;
    auto slot = pages.open_request();
    DSA_CHECK(slot.ok());
    q.req_slot = *slot;
    q.cached_len = cached_len;
    q.new_len = new_len;
    DSA_CHECK(pages.reserve(q.req_slot, cached_len + new_len).ok());
    return q;
  }
};

}  // namespace dsa::runtime::testing
