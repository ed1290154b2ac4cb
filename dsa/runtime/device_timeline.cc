#include "dsa/runtime/device_timeline.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsa::runtime {

namespace {

// Closed spans pending before the last span closes resolves them on its own, and how many of the
// newest it leaves: a run of many steps keeps a bounded number of markers, and the spans it folds
// closed thousands of spans ago, so waiting for them waits for nothing still running (the step
// in flight, which an overlapped schedule must not drain, is among the newest).
constexpr size_t kResolveEvery = 2048;
constexpr size_t kLeaveNewest = 256;

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
  if (Status s = mem_.record_timing_marker(m); !s.ok()) {
    free_markers_.push_back(m);
    return s;
  }
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
  const size_t i = size_t(open_.back());
  open_.pop_back();  // closed whatever happens next: a failed record must not wedge the label
  StatusOr<void*> m = take_marker();
  Status recorded = m.ok() ? mem_.record_timing_marker(*m) : m.status();
  if (!recorded.ok()) {
    // Dropped: its open marker is free again. The spans after it are its closed children (the
    // open ones were opened before it), so no index in open_ moves.
    if (m.ok()) free_markers_.push_back(*m);
    free_markers_.push_back(spans_[i].open_marker);
    spans_.erase(spans_.begin() + std::ptrdiff_t(i));
    return recorded;
  }
  spans_[i].close_marker = *m;
  spans_[i].keep = keep;
  if (open_.empty() && spans_.size() >= kResolveEvery) return resolve_oldest(kLeaveNewest);
  return ok_status();
}

Status DeviceTimeline::resolve() { return resolve_oldest(0); }

Status DeviceTimeline::resolve_oldest(size_t leave_newest) {
  const size_t end = spans_.size() > leave_newest ? spans_.size() - leave_newest : 0;
  std::vector<Span> kept;
  Status failed = ok_status();
  size_t i = 0;
  for (; i < end; ++i) {
    const Span& s = spans_[i];
    if (s.close_marker == nullptr) {
      kept.push_back(s);
      continue;
    }
    if (!s.keep) {
      free_markers_.push_back(s.open_marker);
      free_markers_.push_back(s.close_marker);
      continue;
    }
    // Both readings first, then the totals: a failed reading leaves this span (and the ones
    // after it) pending, counted nowhere yet and its markers still its own.
    void*& last = last_close_[size_t(s.label)];
    StatusOr<double> ms = mem_.elapsed_ms(s.open_marker, s.close_marker);
    StatusOr<double> gap = last != nullptr ? mem_.elapsed_ms(last, s.open_marker) : 0.0;
    if (!ms.ok() || !gap.ok()) {
      failed = !ms.ok() ? ms.status() : gap.status();
      break;
    }
    Total& t = totals_[size_t(s.label)];
    ++t.spans;
    t.ms += *ms;
    if (s.outer >= 0) totals_[size_t(s.outer)].inner_ms += *ms;
    if (last != nullptr) {
      t.between_ms += *gap;
      free_markers_.push_back(last);
    }
    last = s.close_marker;  // kept until the label's next span has measured from it
    free_markers_.push_back(s.open_marker);
  }
  kept.insert(kept.end(), spans_.begin() + std::ptrdiff_t(i), spans_.end());
  spans_ = std::move(kept);
  open_.clear();
  for (size_t j = 0; j < spans_.size(); ++j) {
    if (spans_[j].close_marker == nullptr) open_.push_back(int32_t(j));
  }
  return failed;
}

Status DeviceTimeline::reset() {
  if (!open_.empty()) {
    return failed_precondition(
        fmt::format("device timeline: reset with {} span(s) open", open_.size()));
  }
  DSA_RETURN_IF_ERROR(resolve());
  for (Total& t : totals_) t = Total{};
  for (void*& last : last_close_) {
    if (last != nullptr) free_markers_.push_back(last);
    last = nullptr;
  }
  return ok_status();
}

DeviceTimeline::Total DeviceTimeline::total(int32_t label) const {
  if (label < 0 || size_t(label) >= totals_.size()) return {};
  return totals_[size_t(label)];
}

}  // namespace dsa::runtime
