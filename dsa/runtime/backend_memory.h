// Where a backend's buffers live and how bytes move (ARCHITECTURE.md §2: chosen once, like the op
// table): host memory for the CPU backend, device memory for CUDA. Copies may name host or backend
// memory on either side; on CUDA they are asynchronous on cuda::current_stream() (host sources may
// be reused once the call returns), so read host destinations only after sync().
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/core/word_run.h"
#include "dsa/kernels/op_table.h"

namespace dsa::runtime {

struct MemoryOps {
  kernels::Backend backend;
  StatusOr<void*> (*alloc)(size_t bytes);  // zero-filled, at least 256-byte aligned
  void (*release)(void* p);
  Status (*copy)(void* dst, const void* src, size_t bytes);
  // `height` rows of `width` bytes from rows `src_pitch` apart to rows `dst_pitch` apart.
  Status (*copy_2d)(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t height);
  // dst[r.offset, r.offset + r.words) = src[the same] for each of `count` runs, as one operation
  // where the backend can (CUDA: one kernel from page-locked host memory, cuda/pinned_copy.h):
  // the used parts of a block laid out at capacity, without the rest.
  Status (*copy_runs)(int32_t* dst, const int32_t* src, const WordRun* runs, size_t count);
  Status (*zero)(void* dst, size_t bytes);
  Status (*fill)(void* dst, uint8_t byte, size_t bytes);  // every byte `byte` (test poison)
  Status (*sync)();  // every copy and op issued so far has completed
  // Host memory the backend copies from fastest (page-locked for CUDA, so a copy from it is truly
  // asynchronous): the staging block of a step's inputs.
  StatusOr<void*> (*alloc_staging)(size_t bytes);
  void (*release_staging)(void* p);
  // Memory a new allocation can still take: free device memory for CUDA, the kernel's
  // MemAvailable estimate for the host. What a memory budget (--mem-fraction-static) is a part of.
  StatusOr<size_t> (*available)();
  // A point in the stream's work the host can wait for alone (a CUDA event; on the CPU, where
  // every op has completed when it returns, a token and no-ops): an overlapped step waits for
  // step N's result copy while step N + 1 is still running.
  StatusOr<void*> (*create_marker)();
  void (*destroy_marker)(void* marker);
  Status (*record_marker)(void* marker);  // after everything issued so far
  Status (*wait_marker)(void* marker);    // until the work before the recorded point is done
  // Markers that also time (runtime/device_timeline.h, --profile-device-time): a CUDA event with
  // timing; on the CPU the host clock at the record (the ops before it have completed). Recorded
  // with record_timing_marker, freed with destroy_timing_marker; elapsed_ms waits for `to` and
  // gives the milliseconds from `from` to `to`.
  StatusOr<void*> (*create_timing_marker)();
  void (*destroy_timing_marker)(void* marker);
  Status (*record_timing_marker)(void* marker);
  StatusOr<double> (*elapsed_ms)(void* from, void* to);
};

// CUDA in a host-only build: every entry returns Unimplemented.
const MemoryOps& memory_ops(kernels::Backend backend);

}  // namespace dsa::runtime
