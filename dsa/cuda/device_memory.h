// Raw device memory behind the runtime's backend buffers (runtime/backend_memory.cc dispatches
// here for Backend::kCuda). No CUDA types in this header, so host code that only forwards pointers
// can include it. Copies run on cuda::current_stream(): between device memory and page-locked host
// memory, up to kPinnedCopyMaxBytes, as one PDL kernel (pinned_copy.h); otherwise with
// cudaMemcpyDefault (unified addressing infers the direction, so either side may be host or device
// memory).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::cuda {

// FailedPrecondition while the current stream captures a graph (SPEC.md §5).
StatusOr<void*> device_malloc(size_t bytes);
void device_free(void* p);
// Successful device_malloc calls so far (tests: no allocation during capture or replay).
uint64_t device_allocation_count();
// Page-locked host memory: what the one asynchronous metadata copy of a step reads.
StatusOr<void*> pinned_host_malloc(size_t bytes);
void pinned_host_free(void* p);
Status memcpy_async(void* dst, const void* src, size_t bytes);
Status memcpy_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t height);
Status memset_async(void* dst, int byte, size_t bytes);
// Free device memory now (cudaMemGetInfo): what a memory budget is taken from.
StatusOr<size_t> free_device_memory();
// Waits for everything issued on the current stream (host results of copies become readable).
Status synchronize_stream();
// A point in the current stream's work (a CUDA event without timing): the host can wait for the
// work issued before the point without waiting for what was issued after it, which is how an
// overlapped step reads step N's results while step N + 1 runs.
StatusOr<void*> create_marker();
void destroy_marker(void* marker);
Status record_marker(void* marker);  // the point: what is issued on the current stream so far
Status wait_marker(void* marker);    // returns once the work before the recorded point is done
// The same with timing (--profile-device-time): recorded with record_marker, destroyed with
// destroy_marker; elapsed_ms waits for `to` and gives the GPU time between the two points.
StatusOr<void*> create_timing_marker();
StatusOr<double> elapsed_ms(void* from, void* to);

}  // namespace dsa::cuda
