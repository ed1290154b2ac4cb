// Per-forward activations and scratch in a backend's memory: a bump allocator over chunks that are
// allocated on first need and kept, so steady-state forwards allocate nothing. take() hands out
// zero-filled storage (what the std::vector temporaries it replaces gave); a Frame returns
// everything taken inside it when it closes. Ops run in stream order, so memory handed out again
// is never overwritten before an earlier op on the same stream has read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/runtime/buffer.h"

namespace dsa::runtime {

class Workspace {
 public:
  explicit Workspace(kernels::Backend backend) : mem_(&memory_ops(backend)) {}

  const MemoryOps& memory() const { return *mem_; }

  template <typename T>
  StatusOr<T*> take(size_t count) {
    DSA_ASSIGN_OR_RETURN(void* p, take_bytes(count * sizeof(T)));
    return static_cast<T*>(p);
  }

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
  StatusOr<void*> take_bytes(size_t bytes);

  const MemoryOps* mem_;
  std::vector<Buffer<uint8_t>> chunks_;
  size_t chunk_ = 0, offset_ = 0;
};

}  // namespace dsa::runtime
