// Device discovery that never fails hard: on a machine without a GPU or driver it reports zero
// devices (the static CUDA runtime loads the driver lazily).
#pragma once

#include <string>

namespace dsa::cuda {
int device_count();  // 0 when there is no usable device or driver
std::string device_name(int device);
}  // namespace dsa::cuda
