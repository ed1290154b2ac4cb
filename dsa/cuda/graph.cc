#include "dsa/cuda/graph.h"

#include <fmt/format.h>

#include <utility>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda {

Graph::Graph(Graph&& o) noexcept
    : exec_(std::exchange(o.exec_, nullptr)), num_nodes_(std::exchange(o.num_nodes_, 0)) {}

Graph& Graph::operator=(Graph&& o) noexcept {
  std::swap(exec_, o.exec_);
  std::swap(num_nodes_, o.num_nodes_);
  return *this;
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

bool stream_capturing() {
  cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current_stream(), &s) != cudaSuccess) return false;
  return s != cudaStreamCaptureStatusNone;
}

StatusOr<Graph> Graph::capture(const std::function<Status()>& body) {
  cudaStream_t stream = current_stream();
  if (stream == nullptr) {
    return failed_precondition(
        "graph capture: the current stream is the legacy default stream (call "
        "use_forward_stream() first)");
  }
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  Status body_status = body();
  cudaGraph_t graph = nullptr;
  // Always end the capture, so a failed body leaves the stream usable.
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!body_status.ok()) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the invalidated capture's sticky-free error, if any
    return body_status.with_context("graph capture");
  }
  DSA_CUDA_RETURN_IF_ERROR(end);
  Graph g;
  size_t nodes = 0;
  cudaError_t err = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (err == cudaSuccess) err = cudaGraphInstantiate(&g.exec_, graph, 0);
  cudaGraphDestroy(graph);
  DSA_CUDA_RETURN_IF_ERROR(err);
  g.num_nodes_ = nodes;
  return g;
}

Status Graph::launch() const {
  if (exec_ == nullptr) return failed_precondition("graph launch: the graph was never captured");
  DSA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, current_stream()));
  return ok_status();
}

Status use_forward_stream() {
  thread_local cudaStream_t stream = nullptr;
  if (stream == nullptr) DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&stream));
  set_current_stream(stream);
  return ok_status();
}

}  // namespace dsa::cuda
