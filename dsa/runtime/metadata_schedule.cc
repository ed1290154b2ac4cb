#include "dsa/runtime/metadata_schedule.h"

#include "dsa/kernels/logits_schedule/logits_schedule.h"

namespace dsa::runtime {

int32_t schedule_words(const MetadataConfig& config) {
  return kernels::logits_schedule_words(config.num_consumers);
}

ScheduleLayout schedule_layout(const ForwardMetadata& m) {
  const MetadataHeader& h = m.header;
  if (is_uniform(h.mode)) return {m.row_len.data(), h.batch_pad, h.rows_per_request};
  // An EXTEND without paged requests still gets a (valid, empty) schedule: B = 0, n = 1.
  return {m.pg_row_len.data(), h.paged_requests, h.paged_requests ? h.paged_rows_per_req : 1};
}

Status build_metadata_schedule(const MetadataConfig& config, ForwardMetadata& m) {
  ScheduleLayout layout = schedule_layout(m);
  kernels::LogitsScheduleParams p;
  p.row_len = layout.row_len;
  p.batch_pad = layout.batch;
  p.rows_per_request = layout.rows_per_request;
  p.num_consumers = config.num_consumers;
  p.page_table_width = config.page_table_width;
  p.schedule = m.schedule.data();
  p.schedule_capacity = static_cast<int32_t>(m.schedule.size());
  m.header.schedule_batch = layout.batch;
  m.header.schedule_rows_per_req = layout.rows_per_request;
  return kernels::build_logits_schedule_ref(p);
}

Status validate_metadata_schedule(const MetadataConfig& config, const ForwardMetadata& m) {
  ScheduleLayout layout = schedule_layout(m);
  return kernels::validate_logits_schedule(
      m.schedule.data(), static_cast<int32_t>(m.schedule.size()), layout.row_len, layout.batch,
      layout.rows_per_request, config.num_consumers, config.page_table_width);
}

}  // namespace dsa::runtime
