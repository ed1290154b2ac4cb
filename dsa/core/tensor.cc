#include "dsa/core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace dsa {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kE4M3:
      return "e4m3";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

TensorView::TensorView(void* data, DType dtype, Shape shape, Device device)
    : data_(data),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(contiguous_strides(shape_)),
      device_(device) {}

TensorView::TensorView(void* data, DType dtype, Shape shape, Shape strides, Device device)
    : data_(data),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      device_(device) {}

Status TensorView::expect(std::string_view what, DType dtype, const Shape& shape) const {
  if (dtype_ != dtype || shape_ != shape) {
    return invalid_argument(std::string(what) + ": expected " + std::string(dtype_name(dtype)) +
                            " " + shape_string(shape) + ", got " + std::string(dtype_name(dtype_)) +
                            " " + shape_string(shape_));
  }
  return ok_status();
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  DSA_CHECK(rounded == 0 || p != nullptr);
  if (p) std::memset(p, 0, rounded);
  t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.view_ = TensorView(p, dtype, std::move(shape), Device::kCpu);
  return t;
}

Tensor Tensor::adopt(void* data, Deleter deleter, DType dtype, Shape shape, Device device) {
  Tensor t;
  t.storage_ = std::shared_ptr<void>(data, deleter);
  t.view_ = TensorView(data, dtype, std::move(shape), device);
  return t;
}

}  // namespace dsa
