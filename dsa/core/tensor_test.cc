#include "dsa/core/tensor.h"

#include <gtest/gtest.h>

namespace dsa {
namespace {

TEST(Tensor, EmptyIsZeroedContiguousAndAligned) {
  Tensor t = Tensor::empty(DType::kBF16, {3, 5, 7});
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 210u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.view().strides(), (Shape{35, 7, 1}));
  EXPECT_TRUE(t.view().is_contiguous());
  for (int i = 0; i < 105; ++i) EXPECT_EQ(t.data_as<uint16_t>()[i], 0);
}

TEST(TensorView, ExpectNamesTheArgument) {
  Tensor t = Tensor::empty(DType::kF32, {4, 16});
  EXPECT_TRUE(t.view().expect("w", DType::kF32, {4, 16}).ok());
  Status s = t.view().expect("w", DType::kF32, {4, 64});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "w: expected f32 [4, 64], got f32 [4, 16]");
  EXPECT_FALSE(t.view().expect("w", DType::kBF16, {4, 16}).ok());
}

TEST(TensorView, StridedViewIsNotContiguous) {
  Tensor t = Tensor::empty(DType::kI32, {4, 8});
  TensorView v(t.data(), DType::kI32, {4, 4}, {8, 1}, Device::kCpu);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.numel(), 16);
}

}  // namespace
}  // namespace dsa
