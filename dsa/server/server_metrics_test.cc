// The /metrics text: every metric the server promises is there under its dsa: name, and the
// counters advance by what the engine reports.
#include "dsa/server/server_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace dsa::server {
namespace {

bool has_line(const std::string& text, const std::string& prefix) {
  return text.find("\n" + prefix) != std::string::npos || text.rfind(prefix, 0) == 0;
}

TEST(ServerMetrics, NamesArePresent) {
  ServerMetrics m(3);
  const std::string t = m.serialize();
  for (const char* name :
       {"dsa:num_requests_running ", "dsa:num_requests_waiting ", "dsa:kv_pages_used ",
        "dsa:kv_pages_free ", "dsa:spec_accept_length ",
        "dsa:spec_decode_per_position_acceptance{position=\"1\"}",
        "dsa:spec_decode_per_position_acceptance{position=\"3\"}",
        "dsa:time_to_first_token_seconds_bucket", "dsa:time_per_output_token_seconds_bucket",
        "dsa:e2e_request_latency_seconds_count", "dsa:prompt_tokens_total ",
        "dsa:generation_tokens_total ", "dsa:spec_decode_num_draft_tokens_total ",
        "dsa:spec_decode_num_accepted_tokens_total ",
        "dsa:num_requests_total{finish_reason=\"stop\"}",
        "dsa:num_requests_total{finish_reason=\"abort\"}"}) {
    EXPECT_TRUE(has_line(t, name)) << name << " missing from\n" << t;
  }
}

TEST(ServerMetrics, FiguresAdvance) {
  ServerMetrics m(2);
  m.set_requests(3, 5);
  m.set_kv_pages(10, 90);
  engine::AcceptStats s(2);
  s.add(2);
  s.add(0);
  m.set_accept_stats(s);
  s.add(1);
  m.set_accept_stats(s);  // the counters take the difference, not the total again
  m.add_generation_tokens(7);
  engine::RequestState r;
  r.req.prompt = {1, 2, 3};
  r.output = {4, 5};
  r.finish = engine::FinishReason::kStopString;
  engine::RequestFigures f;
  f.ttft_s = 0.5;
  f.e2e_s = 1.5;
  f.tpot_s = 1.0;
  m.request_finished(r, f);
  m.request_rejected("queue_full");
  const std::string t = m.serialize();
  for (const char* line :
       {"dsa:num_requests_running 3", "dsa:num_requests_waiting 5", "dsa:kv_pages_used 10",
        "dsa:kv_pages_free 90", "dsa:spec_decode_num_draft_tokens_total 6",
        "dsa:spec_decode_num_accepted_tokens_total 3", "dsa:spec_accept_length 2",
        "dsa:generation_tokens_total 7", "dsa:prompt_tokens_total 3",
        "dsa:num_requests_total{finish_reason=\"stop\"} 1",
        "dsa:time_to_first_token_seconds_count 1", "dsa:time_to_first_token_seconds_sum 0.5",
        "dsa:num_requests_rejected_total{reason=\"queue_full\"} 1"}) {
    EXPECT_TRUE(has_line(t, line)) << line << " missing from\n" << t;
  }
}

}  // namespace
}  // namespace dsa::server
