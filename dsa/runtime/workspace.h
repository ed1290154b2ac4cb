// Per-forward activations and scratch in a backend's memory: a bump allocator over chunks that are
// allocated on first need and kept, so steady-state forwards allocate nothing. Every take names
// what its consumer needs: take_zeroed() for a buffer some element of which is read without being
// written first (a gather that skips rows, an op that writes only valid rows), take_uninit() for
// one its producer writes whole. On CUDA each fill is a memset node of every captured graph, so
// uninitialised is the rule and zeroed the exception the call site justifies. A Frame returns
// everything taken inside it when it closes. Ops run in stream order, so memory handed out again is
// never overwritten before an earlier op on the same stream has read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/runtime/buffer.h"

namespace dsa::runtime {

// Poison mode's byte: all ones is a NaN in bf16 and fp32 and -1 in int32, never a value an op
// computes from finite inputs, so an element read before it was written shows in the outputs.
inline constexpr uint8_t kWorkspacePoisonByte = 0xFF;

class Workspace {
 public:
  explicit Workspace(kernels::Backend backend) : mem_(&memory_ops(backend)) {}

  const MemoryOps& memory() const { return *mem_; }

  // Zero-filled storage: for consumers that rely on the zeros.
  template <typename T>
  StatusOr<T*> take_zeroed(size_t count) {
    DSA_ASSIGN_OR_RETURN(void* p, take_bytes(count * sizeof(T), Fill::kZero));
    return static_cast<T*>(p);
  }
  // Storage whose contents are whatever was there (poison mode: kWorkspacePoisonByte): for
  // buffers the producer writes whole before any consumer reads them.
  template <typename T>
  StatusOr<T*> take_uninit(size_t count) {
    DSA_ASSIGN_OR_RETURN(void* p, take_bytes(count * sizeof(T), Fill::kNone));
    return static_cast<T*>(p);
  }

  // Tests: fill every uninitialised take with kWorkspacePoisonByte (a fill op on every backend),
  // so a run with poison equals one without only if no consumer reads an unwritten element.
  void set_poison(bool on) { poison_ = on; }
  bool poison() const { return poison_; }

  // Takes since construction: `zeroed` is the fills a forward pays for (one memset node each in a
  // graph); `uninit` the takes that skipped it (poisoned or not).
  struct Counts {
    int64_t zeroed = 0, uninit = 0;
  };
  const Counts& counts() const { return counts_; }

  struct Mark {
    size_t chunk = 0, offset = 0;
  };
  Mark mark() const { return {chunk_, offset_}; }
  void rewind(Mark m) { chunk_ = m.chunk, offset_ = m.offset; }
  void reset() { rewind({}); }

  class Frame {
   public:
    explicit Frame(Workspace& ws) : ws_(ws), mark_(ws.mark()) {}
    ~Frame() { ws_.rewind(mark_); }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    Workspace& ws_;
    Mark mark_;
  };

 private:
  enum class Fill { kZero, kNone };
  StatusOr<void*> take_bytes(size_t bytes, Fill fill);

  const MemoryOps* mem_;
  std::vector<Buffer<uint8_t>> chunks_;
  size_t chunk_ = 0, offset_ = 0;
  bool poison_ = false;
  Counts counts_;
};

}  // namespace dsa::runtime
