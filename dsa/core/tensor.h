// Owning tensor and non-owning view: dtype, shape, strides (in elements), device.
// Params structs of ops take raw pointers; tensors are for the code that owns the buffers
// (tests, the runtime, the CLI) and hands pointers down.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa {

enum class Device { kCpu, kCuda };

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_string(const Shape& shape);

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::kCpu);
  TensorView(void* data, DType dtype, Shape shape, Shape strides, Device device);

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  bool is_contiguous() const { return strides_ == contiguous_strides(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Checks dtype and shape; the message names `what`, e.g. "q: expected bf16 [4, 16, 576]".
  Status expect(std::string_view what, DType dtype, const Shape& shape) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kU8;
  Shape shape_;
  Shape strides_;
  Device device_ = Device::kCpu;
};

// Owns contiguous storage. Host storage is 64-byte aligned and zero-initialised; other devices
// plug in through `allocate_with` so core/ never includes a CUDA header.
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(DType dtype, Shape shape);  // host, zero-filled
  using Deleter = void (*)(void*);
  static Tensor adopt(void* data, Deleter deleter, DType dtype, Shape shape, Device device);

  TensorView view() const { return view_; }
  void* data() const { return view_.data(); }
  template <typename T>
  T* data_as() const {
    return view_.data_as<T>();
  }
  DType dtype() const { return view_.dtype(); }
  const Shape& shape() const { return view_.shape(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  Device device() const { return view_.device(); }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

}  // namespace dsa
