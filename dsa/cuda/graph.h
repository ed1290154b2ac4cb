// CUDA graphs of whole forwards (SPEC.md §5): capture what a body launches on current_stream(),
// instantiate once, replay. Capture runs in global mode, so an unsafe driver call from any thread
// (a synchronisation, a lazy module load, an allocation) fails the capture instead of being baked
// in; device_malloc() additionally refuses while the current stream captures (the allocator is
// locked), and take_device_error() defers (no synchronisation inside a step).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "dsa/core/status.h"

namespace dsa::cuda {

class Graph {
 public:
  Graph() = default;
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  // The current stream must be one dsa created (the legacy default stream cannot be captured).
  // A failing body, or any CUDA error during capture, ends the capture and returns that error.
  static StatusOr<Graph> capture(const std::function<Status()>& body);
  Status launch() const;  // on current_stream()
  size_t num_nodes() const { return num_nodes_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  size_t num_nodes_ = 0;
};

// True while the current stream is capturing.
bool stream_capturing();

// Creates (once per thread) a blocking stream and makes it the current stream: forwards need a
// capturable stream; blocking, so it still orders after legacy-stream work such as cudaMemset.
Status use_forward_stream();

}  // namespace dsa::cuda
