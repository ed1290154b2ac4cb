// A test's slow PDL predecessor (slow_fill_test_kernel.cu): it lets its successor start at once,
// then spins and only at the end writes. A successor that reads or writes what it wrote before
// its own pdl_wait() returned sees the old words or is overwritten: the order a PDL kernel
// promises is what the test then checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::cuda::test_kernels {

// words[0, count) = value, written after about `spin_us` microseconds, one block on the current
// stream, launched with PDL (cuda::launch).
Status launch_slow_fill(int32_t* words, size_t count, int32_t value, int spin_us);

}  // namespace dsa::cuda::test_kernels
