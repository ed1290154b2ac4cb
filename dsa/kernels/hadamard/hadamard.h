// The indexer's 128-point Hadamard transform (SPEC.md §8.5 step 3), Sylvester order:
//   y_u = 128^-1/2 * sum_v (-1)^popcount(u & v) * x_v,  bf16 in, bf16 out,
// class T: <= 1 bf16 ulp from the correctly rounded value (the reference IS that value).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

inline constexpr int32_t kHadamardDim = 128;  // D_i: every indexer q head and key

struct HadamardParams {
  const bf16* x = nullptr;  // [R, 128] bf16 rows (qi as [T * H_i, 128], ki as [T, 128])
  bf16* y = nullptr;        // [R, 128] bf16 output; may equal x (in place)
  int32_t num_rows = 0;     // R
};

// Host checks (InvalidArgument): R >= 0, pointers.
Status validate(const HadamardParams& p);

// CPU reference: the fast Walsh-Hadamard butterfly in double (exact for bf16 inputs of any
// realistic range), scaled by 128^-1/2 and rounded once to bf16. Non-finite inputs propagate.
Status hadamard_ref(const HadamardParams& p);
// CUDA backend (device pointers): one warp per row, fp32 butterflies.
Status hadamard_cuda(const HadamardParams& p);

}  // namespace dsa::kernels
