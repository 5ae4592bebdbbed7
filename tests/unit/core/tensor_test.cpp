#include <gtest/gtest.h>

#include "core/status.h"
#include "core/tensor.h"

namespace pg {
namespace {

TEST(Tensor, ContiguousStridesAndSlices) {
  Tensor t(DType::kF32, {3, 5, 7});
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 420);
  EXPECT_EQ(t.view().strides[0], 35);
  EXPECT_EQ(t.view().strides[2], 1);
  EXPECT_TRUE(t.view().is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<float>()) % 64, 0u);
  TensorView s = t.view().Slice0(1, 2);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s.as<float>(), t.data<float>() + 35);
  EXPECT_EQ(t.view().Reshape({15, 7}).dim(0), 15);
  EXPECT_EQ(t.view().ShapeString(), "[3, 5, 7] f32");
}

TEST(Tensor, QuantizedRowBytes) {
  Tensor t(DType::kQ4_1, {4, 64});
  EXPECT_EQ(t.nbytes(), 4 * 40);
  EXPECT_EQ(t.view().row_bytes(), 40);
  EXPECT_EQ(t.view().row_ptr(2), reinterpret_cast<uint8_t*>(t.data<uint8_t>()) + 80);
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  try {
    Throw(ErrorCode::kMalformed, "bad tensor {} at {}", "x", 12);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformed);
    EXPECT_STREQ(e.what(), "bad tensor x at 12");
  }
}

}  // namespace
}  // namespace pg
