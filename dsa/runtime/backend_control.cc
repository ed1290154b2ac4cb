#include "dsa/runtime/backend_control.h"

#if defined(DSA_HAVE_CUDA)
#include "dsa/cuda/device_memory.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/graph.h"
#endif

namespace dsa::runtime {

namespace {

#if !defined(DSA_HAVE_CUDA)
Status no_cuda(std::string_view what) {
  return unimplemented(std::string(what) + ": cuda backend not built (this build has no nvcc)");
}
#else
class CudaForwardGraph final : public ForwardGraph {
 public:
  explicit CudaForwardGraph(cuda::Graph g) : graph_(std::move(g)) {}
  Status replay() const override { return graph_.launch(); }
  size_t num_nodes() const override { return graph_.num_nodes(); }

 private:
  cuda::Graph graph_;
};
#endif

}  // namespace

Status use_forward_stream(kernels::Backend backend) {
  if (backend == kernels::Backend::kCpu) return ok_status();
#if defined(DSA_HAVE_CUDA)
  return cuda::use_forward_stream();
#else
  return no_cuda("use_forward_stream");
#endif
}

DeferDeviceErrors::DeferDeviceErrors(kernels::Backend backend) {
#if defined(DSA_HAVE_CUDA)
  if (backend == kernels::Backend::kCuda) impl_ = std::make_shared<cuda::DeferDeviceErrors>();
#else
  (void)backend;
#endif
}

DeferDeviceErrors::~DeferDeviceErrors() = default;

Status take_device_errors(kernels::Backend backend, std::string_view context) {
  if (backend == kernels::Backend::kCpu) return ok_status();
#if defined(DSA_HAVE_CUDA)
  return cuda::take_device_error(context);
#else
  return no_cuda(context);
#endif
}

StatusOr<const void*> device_error_word_address(kernels::Backend backend) {
  if (backend == kernels::Backend::kCpu) return static_cast<const void*>(nullptr);
#if defined(DSA_HAVE_CUDA)
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * w, cuda::device_error_word());
  return static_cast<const void*>(w);
#else
  return no_cuda("device_error_word_address");
#endif
}

uint64_t device_allocation_count(kernels::Backend backend) {
#if defined(DSA_HAVE_CUDA)
  if (backend == kernels::Backend::kCuda) return cuda::device_allocation_count();
#else
  (void)backend;
#endif
  return 0;
}

StatusOr<std::unique_ptr<ForwardGraph>> capture_forward_graph(kernels::Backend backend,
                                                              const std::function<Status()>& body) {
  if (backend == kernels::Backend::kCpu) {
    return unimplemented("capture_forward_graph: the CPU backend has no graphs");
  }
#if defined(DSA_HAVE_CUDA)
  DSA_ASSIGN_OR_RETURN(cuda::Graph g, cuda::Graph::capture(body));
  return std::unique_ptr<ForwardGraph>(new CudaForwardGraph(std::move(g)));
#else
  (void)body;
  return no_cuda("capture_forward_graph");
#endif
}

}  // namespace dsa::runtime
