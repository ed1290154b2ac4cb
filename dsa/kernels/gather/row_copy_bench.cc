// Benchmark of row_copy_cuda on the model's rows: hidden states of V3.2 (7168 bf16 = 14336 B)
// gathered from 4096 rows, for the LM head's sampled rows (32) and for an FP8 expert's input
// gather (512, 4096), and scattered back. Bytes = 2 rows row_bytes (each row read and written
// once). Unchecked mode (no sync).
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/gather/row_copy.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

constexpr int32_t kIndexedRows = 4096;
constexpr int64_t kRowBytes = 7168 * 2;

Status bench(int32_t rows, RowCopyMode mode) {
  testing::Rng rng(3);
  const std::vector<int32_t> perm = rng.permutation(0, kIndexedRows);
  const std::vector<int32_t> index(perm.begin(), perm.begin() + rows);
  DSA_ASSIGN_OR_RETURN(auto dindex,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(index)));
  DSA_ASSIGN_OR_RETURN(auto many, cuda::DeviceBuffer<uint8_t>::alloc(kIndexedRows * kRowBytes));
  DSA_ASSIGN_OR_RETURN(auto few, cuda::DeviceBuffer<uint8_t>::alloc(size_t(rows) * kRowBytes));
  DSA_RETURN_IF_ERROR(many.fill_bytes(0x3C));
  DSA_RETURN_IF_ERROR(few.fill_bytes(0x3C));
  const bool gather = mode == RowCopyMode::kGather;
  const RowCopyParams p{gather ? many.data() : few.data(),
                        gather ? few.data() : many.data(),
                        dindex.data(),
                        kRowBytes,
                        kRowBytes,
                        kRowBytes,
                        rows,
                        kIndexedRows,
                        mode};
  DSA_ASSIGN_OR_RETURN(double us,
                       cuda::median_us([&] { return row_copy_cuda(p); }, cuda::current_stream()));
  char what[64];
  std::snprintf(what, sizeof what, "row_copy %s rows=%d of %d, %lld B",
                gather ? "gather" : "scatter", rows, kIndexedRows, (long long)kRowBytes);
  cuda::print_bandwidth(what, us, 2.0 * rows * kRowBytes);
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  struct Shape {
    RowCopyMode mode;
    int32_t rows;
  };
  const RowCopyMode gather = RowCopyMode::kGather, scatter = RowCopyMode::kScatter;
  return cuda::run_shapes<Shape>(
      "row_copy_bench",
      {{gather, 32}, {gather, 512}, {gather, 4096}, {scatter, 32}, {scatter, 512}, {scatter, 4096}},
      [](Shape s) { return bench(s.rows, s.mode); });
}
