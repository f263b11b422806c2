// Tensor handles, views, host copies and bf16 conversion on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine {
namespace {

TEST(Shape, NumelRowsColsAndStr) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.cols(), 4);
  EXPECT_EQ(s.str(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(Shape{7}.rows(), 1);
  EXPECT_NE(s, (Shape{6, 4}));
}

TEST(Tensor, ZerosRowsViewsShareStorage) {
  cpu::CpuBackend be(1);
  Tensor t = be.zeros(Shape{4, 3}, DType::kF32);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(t.f32()[i], 0.0f);
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  r.f32()[0] = 5.0f;  // element (1, 0) of t
  EXPECT_EQ(t.f32()[3], 5.0f);
  Tensor v = t.view(Shape{2, 2, 3});
  EXPECT_EQ(v.f32()[3], 5.0f);
  EXPECT_EQ(t.rows(4, 4).numel(), 0);
}

TEST(Tensor, StorageFreedWithLastHandle) {
  cpu::CpuBackend be(1);
  const size_t before = be.bytes_in_use();
  Tensor view;
  {
    Tensor t = be.zeros(Shape{1000}, DType::kF32);
    view = t.rows(10, 20);
    EXPECT_EQ(be.bytes_in_use(), before + 4000);
  }
  EXPECT_EQ(be.bytes_in_use(), before + 4000);  // the view keeps it alive
  view = Tensor();
  EXPECT_EQ(be.bytes_in_use(), before);
  EXPECT_GE(be.peak_bytes(), before + 4000);
}

TEST(Tensor, UninitializedIsCountedAndPoisonedForTests) {
  cpu::CpuBackend be(1);
  const size_t before = be.bytes_in_use();
  be.set_poison_uninitialized(true);
  {
    Tensor t = be.uninitialized(Shape{2, 5}, DType::kF32);
    EXPECT_EQ(t.shape(), (Shape{2, 5}));
    EXPECT_EQ(be.bytes_in_use(), before + 40);
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(std::isnan(t.f32()[i])) << i;
    Tensor ids = be.uninitialized(Shape{3}, DType::kI32);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ids.i32()[i], -1);  // an index no op accepts
    Tensor z = be.zeros(Shape{4}, DType::kF32);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(z.f32()[i], 0.0f);  // zeros() stays zeroed
  }
  EXPECT_EQ(be.bytes_in_use(), before);
  EXPECT_EQ(be.uninitialized(Shape{0}, DType::kF32).numel(), 0);
}

TEST(Tensor, HostRoundTripAndCopyAcross) {
  cpu::CpuBackend a(1), b(1);
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  Tensor ta = from_host(a, Shape{2, 3}, values);
  Tensor tb = b.zeros(Shape{3, 2}, DType::kF32);
  copy_across(tb, ta);
  EXPECT_EQ(to_host_f32(tb), values);
  Tensor ids = from_host_i32(a, Shape{3}, std::vector<int32_t>{7, -1, 3});
  EXPECT_EQ(to_host_i32(ids), (std::vector<int32_t>{7, -1, 3}));
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
}

TEST(CpuBackend, ThreadCountIsOurs) {
  cpu::CpuBackend be(1);
  EXPECT_EQ(be.num_threads(), 1);
  be.set_num_threads(2);
  EXPECT_EQ(be.num_threads(), 2);
  be.set_num_threads(0);  // all hardware threads
  EXPECT_GE(be.num_threads(), 1);
}

TEST(CpuBackend, MatmulBlocksSplitTheLongerSideOfLargeProducts) {
  // One thread, or a product too small to be worth waking threads for: one call.
  EXPECT_EQ(cpu::matmul_blocks(1330, 576, 576, 1).count, 1);
  EXPECT_EQ(cpu::matmul_blocks(1, 64, 576, 2).count, 1);
  // A decode step at batch 1 (SmolLM2's 576 x 576): bound by streaming the weights, split.
  EXPECT_EQ(cpu::matmul_blocks(1, 576, 576, 2).count, 4);
  // Tokens x features: rows, two blocks a thread, whole vector widths.
  cpu::MatmulBlocks b = cpu::matmul_blocks(1330, 576, 576, 2);
  EXPECT_TRUE(b.split_rows);
  EXPECT_EQ(b.count, 4);
  EXPECT_EQ(b.size % 16, 0);
  EXPECT_GE(b.size * b.count, 1330);
  EXPECT_LT(b.size * (b.count - 1), 1330);
  // A decode step against the output layer: its columns.
  b = cpu::matmul_blocks(8, 49152, 576, 2);
  EXPECT_FALSE(b.split_rows);
  EXPECT_EQ(b.count, 4);
  // Blocks never thinner than 32: a 64-row product on 16 threads makes 2.
  b = cpu::matmul_blocks(64, 64, 4096, 16);
  EXPECT_EQ(b.count, 2);
  EXPECT_EQ(b.size, 32);
}

TEST(Backend, CreateKnownAndUnknown) {
  auto cpu = create_backend("cpu", 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto bad = create_backend("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos);
}

}  // namespace
}  // namespace rlrun::engine
