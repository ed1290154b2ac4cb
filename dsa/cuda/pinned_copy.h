// Copies between device memory and page-locked host memory as one kernel instead of a copy-engine
// transfer. A step's small copies (its staged metadata block, a sampler's parameters, the accepted
// counts read back) sit between kernels; a cudaMemcpyAsync there costs its own transfer plus an
// idle gap of several microseconds on each side, since a copy neither takes part in programmatic
// dependent launch nor starts before the kernel ahead of it has drained. A kernel launched with
// PDL (cuda/pdl.h) reads or writes the page-locked side directly (unified addressing maps it into
// the device's address space) and joins the launch chain like any other. On the H100 the
// speculative step's four metadata copies cost ~27 us each with their gaps
// (docs/gpu-runs/2026-12-07-s47, tools/kernel_timeline.py). No CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::cuda {

// The largest copy memcpy_async makes a kernel: above it the copy engine's bandwidth wins.
inline constexpr size_t kPinnedCopyMaxBytes = size_t{1} << 20;

// Whether memcpy_async would copy `src` to `dst` by a kernel: one side device memory, the other
// page-locked host memory, at most kPinnedCopyMaxBytes, and DSA_KERNEL_COPY is not 0 (read once
// per process, for measuring the one against the other).
bool pinned_copy_applies(void* dst, const void* src, size_t bytes);

// The copy as one PDL kernel on the current stream: both pointers must be device-accessible
// (device memory or page-locked host memory under unified addressing). Any size and alignment.
Status pinned_copy_async(void* dst, const void* src, size_t bytes);

// `words` 32-bit words at `offset` words into both the source and the destination.
struct WordRun {
  uint32_t offset = 0;
  uint32_t words = 0;
};
// Runs one kernel takes; more are split over several launches.
inline constexpr size_t kMaxWordRuns = 32;

// dst[r.offset, + r.words) = src[the same] for each run, as one PDL kernel per kMaxWordRuns runs
// where pinned_copy_applies(dst, src) holds (a staged block, laid out at capacity, of which a
// forward uses a few hundred bytes); otherwise one cudaMemcpyAsync of the span from the first run
// to the end of the last, which also copies the words between the runs.
Status copy_word_runs_async(int32_t* dst, const int32_t* src, const WordRun* runs, size_t count);

}  // namespace dsa::cuda
