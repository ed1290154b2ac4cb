// Copies between device memory and page-locked host memory as one kernel instead of a copy-engine
// transfer. A step's small copies (its staged metadata block, a sampler's parameters, the accepted
// counts read back) sit between kernels; a cudaMemcpyAsync there costs its own transfer plus an
// idle gap of several microseconds on each side, since a copy neither takes part in programmatic
// dependent launch nor starts before the kernel ahead of it has drained. A kernel launched with
// PDL (cuda/pdl.h) reads or writes the page-locked side directly (unified addressing maps it into
// the device's address space) and joins the launch chain like any other. On the H100 the
// speculative step's four metadata copies cost ~27 us each with their gaps
// (docs/gpu-runs/2026-12-07-s47, tools/kernel_timeline.py). No CUDA types here.
//
// Host to device, each thread of the kernel reads its first unit of the page-locked source when it
// starts, before it waits for the kernels ahead (cuda/pdl.h's one exception; a copy of more units
// than threads reads the rest after the wait): a read over PCIe takes 1-2 us, and it then
// overlaps the kernel ahead instead of following it (the copy in the step's transitions was
// the last 4 us of each, call 1 of docs/gpu-runs/2026-12-07-s48). So device work issued before
// such a copy must not write the host bytes it reads. dsa's page-locked sources are the staging
// the host fills (MemoryOps::alloc_staging; a slot's results part is written by the device and
// read by the host, never copied back). DSA_COPY_PREFETCH=0 turns the early read off (read
// once per process, for measuring).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/core/word_run.h"

namespace dsa::cuda {

// The largest copy memcpy_async makes a kernel: above it the copy engine's bandwidth wins.
inline constexpr size_t kPinnedCopyMaxBytes = size_t{1} << 20;

// How memcpy_async copies `src` to `dst`: by a kernel (kToDevice, kToHost) where one side is
// this device's memory, the other page-locked host memory, the size at most kPinnedCopyMaxBytes
// and DSA_KERNEL_COPY is not 0 (read once per process, for measuring the one against the other);
// otherwise by the copy engine (kCopyEngine).
enum class PinnedCopy { kCopyEngine, kToDevice, kToHost };
PinnedCopy pinned_copy_direction(void* dst, const void* src, size_t bytes);
inline bool pinned_copy_applies(void* dst, const void* src, size_t bytes) {
  return pinned_copy_direction(dst, src, bytes) != PinnedCopy::kCopyEngine;
}

// The copy as one PDL kernel on the current stream: both pointers device-accessible (device
// memory or page-locked host memory under unified addressing), `direction` what
// pinned_copy_direction gave for them (kToDevice: each thread's first unit of the source is read
// before the wait, header; kCopyEngine is InvalidArgument). Any size and alignment.
Status pinned_copy_async(void* dst, const void* src, size_t bytes, PinnedCopy direction);

// Runs one kernel takes; more are split over several launches.
inline constexpr size_t kMaxWordRuns = 32;

// dst[r.offset, + r.words) = src[the same] for each run, as one PDL kernel per kMaxWordRuns runs
// where pinned_copy_applies(dst, src) holds (a staged block, laid out at capacity, of which a
// forward uses a few hundred bytes; from host memory it is read before the wait, header); otherwise
// one cudaMemcpyAsync of the span from the first run to the end of the last, which also copies the
// words between the runs.
Status copy_word_runs_async(int32_t* dst, const int32_t* src, const WordRun* runs, size_t count);

}  // namespace dsa::cuda
