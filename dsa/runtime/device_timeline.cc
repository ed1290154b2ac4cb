#include "dsa/runtime/device_timeline.h"

#include <fmt/format.h>

namespace dsa::runtime {

namespace {

// Spans pending before close() resolves them on its own: a run of many steps keeps a bounded
// number of markers, and the wait this costs (the stream's work up to a recent close) is rare.
constexpr size_t kResolveEvery = 2048;

}  // namespace

DeviceTimeline::DeviceTimeline(const MemoryOps& mem, int32_t num_labels)
    : mem_(mem),
      totals_(size_t(std::max(num_labels, 0))),
      last_close_(size_t(std::max(num_labels, 0)), nullptr) {}

DeviceTimeline::~DeviceTimeline() {
  for (void* m : all_markers_) mem_.destroy_timing_marker(m);
}

StatusOr<void*> DeviceTimeline::take_marker() {
  if (!free_markers_.empty()) {
    void* m = free_markers_.back();
    free_markers_.pop_back();
    return m;
  }
  DSA_ASSIGN_OR_RETURN(void* m, mem_.create_timing_marker());
  all_markers_.push_back(m);
  return m;
}

Status DeviceTimeline::open(int32_t label) {
  if (label < 0 || size_t(label) >= totals_.size()) {
    return invalid_argument(
        fmt::format("device timeline: label {} out of [0, {})", label, totals_.size()));
  }
  for (int32_t i : open_) {
    if (spans_[size_t(i)].label == label) {
      return invalid_argument(fmt::format("device timeline: label {} is already open", label));
    }
  }
  DSA_ASSIGN_OR_RETURN(void* m, take_marker());
  DSA_RETURN_IF_ERROR(mem_.record_timing_marker(m));
  const int32_t outer = open_.empty() ? -1 : spans_[size_t(open_.back())].label;
  spans_.push_back({label, outer, m, nullptr});
  open_.push_back(int32_t(spans_.size() - 1));
  return ok_status();
}

Status DeviceTimeline::close(int32_t label, bool keep) {
  if (open_.empty() || spans_[size_t(open_.back())].label != label) {
    return invalid_argument(
        fmt::format("device timeline: close({}) but the innermost open span is {}", label,
                    open_.empty() ? -1 : spans_[size_t(open_.back())].label));
  }
  DSA_ASSIGN_OR_RETURN(void* m, take_marker());
  DSA_RETURN_IF_ERROR(mem_.record_timing_marker(m));
  spans_[size_t(open_.back())].close_marker = m;
  spans_[size_t(open_.back())].keep = keep;
  open_.pop_back();
  if (spans_.size() >= kResolveEvery) return resolve();
  return ok_status();
}

Status DeviceTimeline::resolve() {
  std::vector<Span> still_open;
  for (const Span& s : spans_) {
    if (s.close_marker == nullptr) {
      still_open.push_back(s);
      continue;
    }
    if (!s.keep) {
      free_markers_.push_back(s.open_marker);
      free_markers_.push_back(s.close_marker);
      continue;
    }
    Total& t = totals_[size_t(s.label)];
    DSA_ASSIGN_OR_RETURN(const double ms, mem_.elapsed_ms(s.open_marker, s.close_marker));
    ++t.spans;
    t.ms += ms;
    if (s.outer >= 0) totals_[size_t(s.outer)].inner_ms += ms;
    void*& last = last_close_[size_t(s.label)];
    if (last != nullptr) {
      DSA_ASSIGN_OR_RETURN(const double gap, mem_.elapsed_ms(last, s.open_marker));
      t.between_ms += gap;
      free_markers_.push_back(last);
    }
    last = s.close_marker;  // kept until the label's next span has measured from it
    free_markers_.push_back(s.open_marker);
  }
  spans_ = std::move(still_open);
  open_.clear();
  for (size_t i = 0; i < spans_.size(); ++i) open_.push_back(int32_t(i));
  return ok_status();
}

DeviceTimeline::Total DeviceTimeline::total(int32_t label) const {
  if (label < 0 || size_t(label) >= totals_.size()) return {};
  return totals_[size_t(label)];
}

}  // namespace dsa::runtime
