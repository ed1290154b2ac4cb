#include <fmt/format.h>

#include <string>
#include <vector>

#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "logits_schedule";

std::string word_name(int32_t w) {
  static constexpr std::string_view kHeader[kScheduleHeaderWords] = {
      "magic",        "version",          "batch_pad",      "rows_per_request", "num_consumers",
      "split_tokens", "page_table_width", "total_segments", "len_hash",         "reserved"};
  if (w < kScheduleHeaderWords) return std::string(kHeader[w]);
  const int32_t i = (w - kScheduleHeaderWords) / 2;
  return fmt::format("entry[{}].{}", i, (w - kScheduleHeaderWords) % 2 == 0 ? "b" : "k");
}

Status word_mismatch(std::string_view op, int32_t w, int32_t got, int32_t expected) {
  return failed_precondition(fmt::format("{}: schedule word {} ({}) = {}, expected {}", op, w,
                                         word_name(w), got, expected));
}

// Host rules shared by the builder and the validator (all InvalidArgument).
Status validate_shape(std::string_view op, int32_t batch_pad, int32_t n, int32_t G, int32_t W,
                      int32_t P) {
  DSA_RETURN_IF_ERROR(require_in(op, "batch_pad", batch_pad, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "rows_per_request", n, 1, 8));
  DSA_RETURN_IF_ERROR(require_in(op, "num_consumers", G, 1, (INT32_MAX - 12) / 2));
  DSA_RETURN_IF_ERROR(require_eq(op, "page_size", P, kPageSize));
  DSA_RETURN_IF_ERROR(require_in(op, "page_table_width", W, 1, INT32_MAX / P));
  // T_seg <= B_pad * ceil(W P / S_tok) must fit the int32 header word.
  const int64_t max_total = int64_t{batch_pad} * schedule_segments(W * P);
  if (max_total > INT32_MAX) {
    return invalid_argument(fmt::format(
        "{}: batch_pad = {} with page_table_width = {}: up to {} segments overflow int32", op,
        batch_pad, W, max_total));
  }
  return ok_status();
}
}  // namespace

int32_t logits_schedule_words(int32_t num_consumers) { return schedule_words_for(num_consumers); }

Status validate(const LogitsScheduleParams& p) {
  DSA_RETURN_IF_ERROR(validate_shape(kOp, p.batch_pad, p.rows_per_request, p.num_consumers,
                                     p.page_table_width, p.page_size));
  if (p.batch_pad > 0) DSA_RETURN_IF_ERROR(require_pointer(kOp, "row_len", p.row_len));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "schedule", p.schedule));
  const int32_t words = schedule_words_for(p.num_consumers);
  if (p.schedule_capacity < words) {
    return resource_exhausted(
        fmt::format("{}: schedule_capacity = {}: must be >= 10 + 2(G + 1) = {} words", kOp,
                    p.schedule_capacity, words));
  }
  return ok_status();
}

Status build_logits_schedule_ref(const LogitsScheduleParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  schedule_build(p.row_len, p.batch_pad, p.rows_per_request, p.num_consumers, p.page_table_width,
                 p.page_size, p.schedule);
  return ok_status();
}

Status check_schedule_header(std::string_view op, const int32_t* schedule, int32_t batch_pad,
                             int32_t n, int32_t G, int32_t W) {
  const int32_t expected[] = {
      kScheduleMagic, kScheduleVersion, batch_pad, n, G, kScheduleSplitTokens, W};
  for (int32_t w = 0; w <= kScheduleWordPageTableWidth; ++w) {
    if (schedule[w] != expected[w]) return word_mismatch(op, w, schedule[w], expected[w]);
  }
  return ok_status();
}

Status check_schedule_hash(std::string_view op, const int32_t* schedule, const int32_t* row_len,
                           int32_t batch_pad, int32_t n) {
  const auto expected = static_cast<int32_t>(length_hash(row_len, int64_t{batch_pad} * n));
  const int32_t got = schedule[kScheduleWordLenHash];
  if (got != expected) return word_mismatch(op, kScheduleWordLenHash, got, expected);
  return ok_status();
}

Status validate_logits_schedule(const int32_t* schedule, int32_t schedule_words,
                                const int32_t* row_len, int32_t batch_pad, int32_t n, int32_t G,
                                int32_t W) {
  DSA_RETURN_IF_ERROR(validate_shape(kOp, batch_pad, n, G, W, kPageSize));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "schedule", schedule));
  if (batch_pad > 0) DSA_RETURN_IF_ERROR(require_pointer(kOp, "row_len", row_len));
  const int32_t words = schedule_words_for(G);
  std::vector<int32_t> expected(static_cast<size_t>(words));
  schedule_build(row_len, batch_pad, n, G, W, kPageSize, expected.data());
  // Header first, so a schedule built for another G reports word 4 rather than its size.
  const int32_t header =
      schedule_words < kScheduleHeaderWords ? schedule_words : kScheduleHeaderWords;
  for (int32_t w = 0; w < header; ++w) {
    if (schedule[w] != expected[w]) return word_mismatch(kOp, w, schedule[w], expected[w]);
  }
  if (schedule_words != words) {
    return failed_precondition(
        fmt::format("{}: schedule_words = {}, expected 10 + 2(G + 1) = {} for G = {}", kOp,
                    schedule_words, words, G));
  }
  for (int32_t w = kScheduleHeaderWords; w < words; ++w) {
    if (schedule[w] != expected[w]) return word_mismatch(kOp, w, schedule[w], expected[w]);
  }
  return ok_status();
}

}  // namespace dsa::kernels
