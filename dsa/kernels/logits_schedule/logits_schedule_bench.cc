// Benchmark of build_logits_schedule_cuda: one single-CTA launch per forward. Latency-bound (a
// few KB move), so the figure that matters is the time; bytes = 4 B_pad n (row_len read) +
// 4 (10 + 2(G + 1)) (schedule written). Eager launches on a stream, and replays of a CUDA graph
// holding the one kernel (what graph mode runs).
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

Status bench(int32_t batch_pad, int32_t n, int32_t G) {
  testing::Rng rng(7);
  const int32_t W = 2561;  // max_ctx 163840 (SPEC.md §2.6)
  std::vector<int32_t> row_len(size_t(batch_pad) * n);
  for (int32_t b = 0; b < batch_pad; ++b) {
    const auto c = int32_t(rng.randint(0, 65536 - n));
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b) * n + j] = c + j + 1;
  }
  DSA_ASSIGN_OR_RETURN(auto d_len,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(row_len)));
  const int32_t words = logits_schedule_words(G);
  DSA_ASSIGN_OR_RETURN(auto d_out, cuda::DeviceBuffer<int32_t>::alloc(size_t(words)));
  LogitsScheduleParams p;
  p.row_len = d_len.data();
  p.batch_pad = batch_pad;
  p.rows_per_request = n;
  p.num_consumers = G;
  p.page_table_width = W;
  p.schedule = d_out.data();
  p.schedule_capacity = words;

  cudaStream_t stream = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::set_current_stream(stream);
  DSA_ASSIGN_OR_RETURN(
      double eager_us,
      cuda::median_us([&] { return build_logits_schedule_cuda(p); }, stream, 10, 200));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status captured = build_logits_schedule_cuda(p);
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream, &graph));
  DSA_RETURN_IF_ERROR(captured);
  DSA_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
  DSA_ASSIGN_OR_RETURN(double graph_us,
                       cuda::median_us(
                           [&]() -> Status {
                             DSA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream));
                             return ok_status();
                           },
                           stream, 10, 200));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::set_current_stream(nullptr);
  cudaStreamDestroy(stream);

  const double bytes = 4.0 * batch_pad * n + 4.0 * words;
  std::printf(
      "logits_schedule B_pad=%-4d n=%d G=%-3d  eager %7.2f us  graph %7.2f us  %7.0f B  "
      "%8.4f TB/s (%.3f%% of %.2f TB/s; latency-bound)\n",
      batch_pad, n, G, eager_us, graph_us, bytes, bytes / (graph_us * 1e-6) / 1e12,
      100.0 * bytes / (graph_us * 1e-6) / cuda::kH200Bandwidth, cuda::kH200Bandwidth / 1e12);
  return ok_status();
}

}  // namespace

int main() {
  struct Shape {
    int32_t batch_pad, n, G;
  };
  for (Shape s : {Shape{128, 4, 132}, Shape{32, 1, 132}, Shape{256, 8, 132}, Shape{128, 4, 66}}) {
    Status st = bench(s.batch_pad, s.n, s.G);
    if (!st.ok()) {
      std::fprintf(stderr, "logits_schedule_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
