// The GPU time of spans of a run's work (--profile-device-time): a timing marker is recorded on
// the stream where a span opens and where it closes, and the spans are resolved after the work
// has run, so nothing waits inside a step. On CUDA a span is the stream's time between the two
// points: the kernels and copies issued in between, and any time the GPU sat idle waiting for the
// host to issue them. On the CPU, whose ops complete before they return, it is the host's time.
// What it answers: per step, the time of each forward against the whole step (issue 15), and the
// stream's time between steps (the work outside them, such as prefill forwards, and idle).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/runtime/backend_memory.h"

namespace dsa::runtime {

class DeviceTimeline {
 public:
  // Spans carry labels [0, num_labels).
  DeviceTimeline(const MemoryOps& mem, int32_t num_labels);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // Opens a span of `label` after everything issued so far. Spans nest: a span opened while
  // others are open is inside the innermost (its time counts in that one's `inner_ms`). A label
  // has one open span at a time. InvalidArgument for a label out of range or already open.
  Status open(int32_t label);
  // Closes the open span of `label`, which must be the innermost open one. keep = false drops it
  // (a step that launched nothing): it counts nowhere, and the label's between time runs on.
  Status close(int32_t label, bool keep = true);

  struct Total {
    int64_t spans = 0;
    double ms = 0;        // summed over the label's spans
    double inner_ms = 0;  // of that, inside the spans directly nested in them
    // From the close of each span of this label to the open of the next one: the stream's time
    // outside the label's spans (other work, or idle).
    double between_ms = 0;
  };
  // Waits for the work of every closed span and folds them into the totals. Spans still open are
  // kept; so is every span from one whose reading fails on (counted nowhere, tried again next
  // time). Also done on its own, when the outermost span closes with many pending, for all but
  // the newest spans (long finished: the step in flight is not waited for).
  Status resolve();
  // The resolved totals of `label` (zeros for one out of range).
  Total total(int32_t label) const;
  // Starts the totals over (a warm-up's spans then count nowhere): resolves every closed span,
  // zeros the totals and forgets each label's last close, so the next span measures no between
  // time from before. FailedPrecondition while a span is open.
  Status reset();
  // Markers made so far: they are reused, so this stays bounded over a long run.
  size_t markers_made() const { return all_markers_.size(); }

 private:
  struct Span {
    int32_t label, outer;  // outer: the label of the span it is inside, or -1
    void* open_marker = nullptr;
    void* close_marker = nullptr;  // null while open
    bool keep = true;
  };
  StatusOr<void*> take_marker();
  // resolve() of every span but the newest `leave_newest`.
  Status resolve_oldest(size_t leave_newest);

  const MemoryOps& mem_;
  std::vector<Total> totals_;
  std::vector<Span> spans_;          // since the last resolve, in open order
  std::vector<int32_t> open_;        // indices in spans_ of the open spans, innermost last
  std::vector<void*> free_markers_;  // recorded and resolved: reusable
  std::vector<void*> last_close_;    // per label: the close marker of its last resolved span
  std::vector<void*> all_markers_;   // every marker made (freed by the destructor)
};

}  // namespace dsa::runtime
