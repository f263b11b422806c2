// The CPU's GEMM: oneDNN's sgemm against a plain triple loop (every transpose, strided operands,
// alpha and beta), the CPU features read from CPUID, and the check that fails when the product
// runs kernels older than the host supports (the fallback that once cost two thirds of the speed).
#include "engine/cpu/cpu_gemm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "engine/bf16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_gemm_nt.h"

namespace rlrun::engine::cpu {
namespace {

using ::testing::HasSubstr;

// C = alpha op(A) op(B) + beta C, in double.
void reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const std::vector<float>& a,
                    int64_t lda, const std::vector<float>& b, int64_t ldb, float beta, std::vector<float>& c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = static_cast<float>(alpha * s + (beta == 0 ? 0.0 : beta * c[i * ldc + j]));
    }
  }
}

TEST(CpuGemm, MatchesATripleLoopForEveryTransposeStrideAndScale) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const int64_t m = 37, n = 29, k = 53, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc);
        for (float& x : a) x = normal(rng);
        for (float& x : b) x = normal(rng);
        for (float& x : c) x = normal(rng);
        std::vector<float> want = c;
        reference_gemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, want, ldc);
        sgemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j)
            ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], 1e-4f * (1 + std::fabs(want[i * ldc + j])))
                << "ta " << ta << " tb " << tb << " beta " << beta << " at " << i << "," << j;
      }
    }
  }
}

// What /proc/cpuinfo's first "flags" line says of `flag` (the kernel's own CPUID reading).
bool proc_cpuinfo_has(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w)
      if (w == flag) return true;
    return false;
  }
  return false;
}

TEST(CpuFeatures, AgreeWithTheKernelsReading) {
  std::ifstream probe("/proc/cpuinfo");
  if (!probe) GTEST_SKIP() << "no /proc/cpuinfo";
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.avx2, proc_cpuinfo_has("avx2"));
  EXPECT_EQ(f.fma, proc_cpuinfo_has("fma"));
  EXPECT_EQ(f.avx512f, proc_cpuinfo_has("avx512f"));
  EXPECT_EQ(f.avx512bw, proc_cpuinfo_has("avx512bw"));
  EXPECT_EQ(f.avx512_bf16, proc_cpuinfo_has("avx512_bf16"));
  EXPECT_EQ(f.amx_tile, proc_cpuinfo_has("amx_tile"));
  EXPECT_FALSE(f.model_name.empty());
}

// The check the issue asked for: on a host with AVX-512 or AVX2, the products run kernels of that
// width. Fails where the GEMM library falls back (as OpenBLAS did to SSE3 on an unknown Xeon).
TEST(CpuGemm, RunsTheWidestKernelsThisHostSupports) {
  const CpuFeatures& cpu = cpu_features();
  const GemmLibrary& lib = gemm_library();
  EXPECT_TRUE(gemm_runs_widest_fp32_kernels(cpu, lib)) << describe_compute(nullptr);
  if (cpu.avx512_core()) {
    EXPECT_THAT(lib.isa, HasSubstr("avx512")) << describe_compute(nullptr);
    EXPECT_EQ(gemm_nt_isa(), GemmNtIsa::kAvx512);
  } else if (cpu.avx2 && cpu.fma) {
    EXPECT_THAT(lib.isa, HasSubstr("avx2")) << describe_compute(nullptr);
    EXPECT_EQ(gemm_nt_isa(), GemmNtIsa::kAvx2);
  }
}

TEST(CpuGemm, AnOlderKernelThanTheHostRunsIsNamed) {
  CpuFeatures avx512;
  avx512.avx2 = avx512.fma = avx512.avx512f = avx512.avx512bw = avx512.avx512dq = avx512.avx512vl = true;
  CpuFeatures avx2;
  avx2.avx2 = avx2.fma = true;
  const GemmLibrary sse{"lib", "sse41", "sse"}, wide2{"lib", "avx2", "avx2"}, wide512{"lib", "avx512_core", "avx512"};
  EXPECT_FALSE(gemm_runs_widest_fp32_kernels(avx512, wide2));
  EXPECT_FALSE(gemm_runs_widest_fp32_kernels(avx512, sse));
  EXPECT_TRUE(gemm_runs_widest_fp32_kernels(avx512, wide512));
  EXPECT_FALSE(gemm_runs_widest_fp32_kernels(avx2, sse));
  EXPECT_TRUE(gemm_runs_widest_fp32_kernels(avx2, wide2));
  avx512.avx512_bf16 = true;  // fp32 products have no wider kernels than AVX-512's
  EXPECT_TRUE(gemm_runs_widest_fp32_kernels(avx512, {"lib", "avx512_core_bf16", "avx512_bf16"}));
}

TEST(CpuGemm, MeasuredSpeedIsAFractionOfTheCoresPeak) {
  const GemmSpeed s = measure_gemm_speed();
  EXPECT_GT(s.sgemm_gflops, 0);
  if (!cpu_features().avx2) GTEST_SKIP() << "no FMA peak to measure without AVX2";
  EXPECT_GT(s.fma_peak_gflops, 0);
  // Not a speed test (the host is shared): the product can never beat the FMAs it is made of by
  // much; a ratio far above 1 means the peak was measured wrong.
  EXPECT_LT(s.efficiency(), 1.5) << describe_compute(&s);
  EXPECT_THAT(describe_compute(&s), HasSubstr("of the core's fp32 peak"));
}

}  // namespace
}  // namespace rlrun::engine::cpu

namespace rlrun::engine::cpu {
namespace {

// compute_dtype bf16: each product of at least kBf16MinRows rows equals the fp32 product of the
// bf16 roundings of its operands (fp32 sums), for every transpose, with alpha and beta, split over
// threads or not; products of few rows (the few-rows kernel's) stay exact fp32.
TEST(CpuBackendBf16, ProductsAreThoseOfTheBf16RoundedOperands) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "no native bf16 products here: " << describe_compute(nullptr);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int threads : {1, 2}) {
    CpuBackend be(threads);
    ASSERT_TRUE(be.set_matmul_bf16(true));
    // Blocks of rows (m >= n) and of columns (m < n: op(A) = A^T only, few rows of A are the
    // few-rows kernel's, fp32 by design).
    for (auto [ta, tb, m, n] : {std::tuple{false, false, 160, 80}, std::tuple{false, true, 160, 80},
                                std::tuple{true, false, 160, 80}, std::tuple{true, true, 160, 80},
                                std::tuple{true, false, 48, 200}, std::tuple{true, true, 48, 200}}) {
      {
        const int64_t k = 72;
        Tensor a = be.zeros(ta ? Shape{k, m} : Shape{m, k}, DType::kF32);
        Tensor b = be.zeros(tb ? Shape{n, k} : Shape{k, n}, DType::kF32);
        Tensor c = be.zeros(Shape{m, n}, DType::kF32);
        for (int64_t i = 0; i < a.numel(); ++i) a.f32()[i] = normal(rng);
        for (int64_t i = 0; i < b.numel(); ++i) b.f32()[i] = normal(rng);
        for (int64_t i = 0; i < c.numel(); ++i) c.f32()[i] = normal(rng);
        std::vector<float> a16(a.f32(), a.f32() + a.numel()), b16(b.f32(), b.f32() + b.numel());
        for (float& x : a16) x = bf16_to_f32(f32_to_bf16(x));
        for (float& x : b16) x = bf16_to_f32(f32_to_bf16(x));
        std::vector<float> want(c.f32(), c.f32() + c.numel()), exact = want;
        reference_gemm(ta, tb, m, n, k, 0.5f, a16, ta ? m : k, b16, tb ? k : n, 1.0f, want, n);
        std::vector<float> a32(a.f32(), a.f32() + a.numel()), b32(b.f32(), b.f32() + b.numel());
        reference_gemm(ta, tb, m, n, k, 0.5f, a32, ta ? m : k, b32, tb ? k : n, 1.0f, exact, n);
        be.matmul(c, a, b, ta, tb, 0.5f, 1.0f);
        double worst_vs_rounded = 0, worst_vs_exact = 0;
        for (int64_t i = 0; i < m * n; ++i) {
          worst_vs_rounded = std::max(worst_vs_rounded, std::fabs(double(c.f32()[i]) - want[i]));
          worst_vs_exact = std::max(worst_vs_exact, std::fabs(double(c.f32()[i]) - exact[i]));
        }
        EXPECT_LT(worst_vs_rounded, 2e-5) << "threads " << threads << " ta " << ta << " tb " << tb << " m " << m << " n " << n;
        EXPECT_GT(worst_vs_exact, 1e-4) << "the operands were not rounded to bf16";
      }
    }
    // Few rows: fp32.
    Tensor x = be.zeros(Shape{4, 64}, DType::kF32), w = be.zeros(Shape{32, 64}, DType::kF32),
           y = be.zeros(Shape{4, 32}, DType::kF32);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = normal(rng);
    std::vector<float> want(4 * 32);
    reference_gemm(false, true, 4, 32, 64, 1.0f, std::vector<float>(x.f32(), x.f32() + x.numel()), 64,
                   std::vector<float>(w.f32(), w.f32() + w.numel()), 64, 0.0f, want, 32);
    be.matmul(y, x, w, false, true);
    for (int i = 0; i < 4 * 32; ++i) EXPECT_NEAR(y.f32()[i], want[i], 1e-4);
  }
}

// base_weights_dtype: bf16: f32 activations times bf16 weights as stored, in both layouts the model
// multiplies weights in (y = x W^T forward, dx = dy W backward), for few rows (a decode step) and
// many, on one thread or two (blocks of rows or of columns): the fp32 product of the bf16-rounded
// activations and the weights with fp32 sums, and within bf16 rounding of the fp32 product.
TEST(CpuBackendBf16, F32ActivationsTimesBf16WeightsInEveryLayoutTheModelUses) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "no native bf16 products here: " << describe_compute(nullptr);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  for (int threads : {1, 2}) {
    CpuBackend be(threads);  // no set_matmul_bf16: the weights' dtype decides
    for (bool tb : {true, false}) {
      for (int64_t m : {1, 3, 37, 160}) {
        for (float beta : {0.0f, 1.0f}) {
          const int64_t n = 96, k = 72;
          Tensor x = be.zeros(Shape{m, k}, DType::kF32), c = be.zeros(Shape{m, n}, DType::kF32);
          Tensor w = be.zeros(tb ? Shape{n, k} : Shape{k, n}, DType::kBF16);
          std::vector<float> w32(static_cast<size_t>(n * k)), w16(w32.size());
          for (size_t i = 0; i < w32.size(); ++i) {
            w32[i] = normal(rng);
            w.bf16()[i] = f32_to_bf16(w32[i]);
            w16[i] = bf16_to_f32(w.bf16()[i]);
          }
          for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
          for (int64_t i = 0; i < c.numel(); ++i) c.f32()[i] = normal(rng);
          std::vector<float> x32(x.f32(), x.f32() + x.numel()), x16 = x32;
          for (float& v : x16) v = bf16_to_f32(f32_to_bf16(v));
          std::vector<float> want(c.f32(), c.f32() + c.numel()), exact = want;
          reference_gemm(false, tb, m, n, k, 0.5f, x16, k, w16, tb ? k : n, beta, want, n);
          reference_gemm(false, tb, m, n, k, 0.5f, x32, k, w32, tb ? k : n, beta, exact, n);
          be.matmul(c, x, w, false, tb, 0.5f, beta);
          // bf16's unit roundoff is 2^-8: each term x w is off by at most ~2^-7 of itself.
          std::vector<float> bound(want.size(), 0.0f), x_abs = x32, w_abs = w32;
          for (float& v : x_abs) v = std::fabs(v);
          for (float& v : w_abs) v = std::fabs(v);
          reference_gemm(false, tb, m, n, k, 0.5f / 128, x_abs, k, w_abs, tb ? k : n, 0.0f, bound, n);
          double worst_vs_rounded = 0, worst_vs_exact = 0;
          for (int64_t i = 0; i < m * n; ++i) {
            worst_vs_rounded = std::max(worst_vs_rounded, std::fabs(double(c.f32()[i]) - want[i]));
            worst_vs_exact = std::max(worst_vs_exact, std::fabs(double(c.f32()[i]) - exact[i]) / (bound[i] + 1e-6));
          }
          const std::string where = "threads " + std::to_string(threads) + (tb ? " x W^T" : " dy W") + " rows " +
                                    std::to_string(m) + " beta " + std::to_string(beta);
          EXPECT_LT(worst_vs_rounded, 2e-5) << where;
          EXPECT_LT(worst_vs_exact, 1.0) << where << ": past bf16 rounding of the fp32 product";
        }
      }
    }
  }
}

// A rollout engine's rows change with every step: one primitive serves them all (a primitive per
// row count compiled a kernel in most generation steps, 10x slower than fp32).
TEST(CpuBackendBf16, ProductsOfEveryRowCountShareOnePrimitive) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "no native bf16 products here: " << describe_compute(nullptr);
  CpuBackend be(1);
  ASSERT_TRUE(be.set_matmul_bf16(true));
  Tensor w = be.zeros(Shape{48, 40}, DType::kF32);
  const int64_t before = gemm_bf16_primitives_built();
  for (int64_t m = 130; m < 170; ++m) {  // past the few-rows kernel's 128
    Tensor x = be.zeros(Shape{m, 40}, DType::kF32), y = be.zeros(Shape{m, 48}, DType::kF32);
    be.matmul(y, x, w, false, true);
  }
  EXPECT_EQ(gemm_bf16_primitives_built() - before, 1);
}

// A weight gradient dY^T X sums over a step's tokens, a count that changes every step: one
// primitive serves every count (a primitive per count kept ~1.4 MB each, every step), and each
// product is still the fp32 product of the rounded operands.
TEST(CpuBackendBf16, WeightGradientsOfEveryTokenCountShareOnePrimitive) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "no native bf16 products here: " << describe_compute(nullptr);
  CpuBackend be(1);
  ASSERT_TRUE(be.set_matmul_bf16(true));
  const int64_t before = gemm_bf16_primitives_built();
  for (int64_t tokens : {40, 41, 57, 64, 100}) {
    std::vector<float> dy(tokens * 24), x(tokens * 20);
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = bf16_to_f32(f32_to_bf16(std::sin(0.37f * i)));
    for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(f32_to_bf16(std::cos(0.23f * i)));
    Tensor tdy = be.zeros(Shape{tokens, 24}, DType::kF32), tx = be.zeros(Shape{tokens, 20}, DType::kF32);
    std::copy(dy.begin(), dy.end(), tdy.f32());
    std::copy(x.begin(), x.end(), tx.f32());
    Tensor dw = be.zeros(Shape{24, 20}, DType::kF32);
    be.matmul(dw, tdy, tx, true, false);  // dW = dY^T X
    for (int64_t r = 0; r < 24; ++r)
      for (int64_t c = 0; c < 20; ++c) {
        double want = 0;
        for (int64_t t = 0; t < tokens; ++t) want += double(dy[t * 24 + r]) * x[t * 20 + c];
        ASSERT_NEAR(dw.f32()[r * 20 + c], want, 1e-4 * (1 + std::abs(want))) << tokens << " tokens, (" << r << ", " << c << ")";
      }
  }
  EXPECT_EQ(gemm_bf16_primitives_built() - before, 1);
}

// On a CPU with bf16 instructions, the products gemm_bf16 builds (their rows, and a weight
// gradient's k, known only when they run) must get JIT kernels: oneDNN's reference kernel for
// them would make compute_dtype: auto pick something slower than fp32. Native means both, and the
// host's one-line description names the implementation.
TEST(CpuBackendBf16, NativeMeansTheRuntimeShapedProductsRunJitKernels) {
  const CpuFeatures& cpu = cpu_features();
  if (!cpu.bf16_instructions()) GTEST_SKIP() << "no bf16 instructions here: " << describe_compute(nullptr);
  const std::string impl = gemm_bf16_implementation();
  ASSERT_FALSE(impl.empty()) << "oneDNN built no bf16 matmul here";
  const bool bf16_kernels = gemm_library().bf16_kernels();  // oneDNN may be held below the CPU (ONEDNN_MAX_CPU_ISA)
  EXPECT_EQ(bf16_gemm_native(), bf16_kernels && impl.find("ref") == std::string::npos) << impl;
  if (bf16_kernels) EXPECT_TRUE(bf16_gemm_native()) << "bf16 products here run " << impl << ": " << describe_compute(nullptr);
  EXPECT_THAT(describe_compute(nullptr), HasSubstr("(bf16: " + impl));
}

TEST(CpuBackendBf16, RefusedWhereTheCpuHasNoNativeBf16Products) {
  CpuBackend be(1);
  EXPECT_EQ(be.set_matmul_bf16(true), bf16_gemm_native());
  EXPECT_TRUE(be.set_matmul_bf16(false));
  EXPECT_FALSE(be.matmul_bf16());
}

}  // namespace
}  // namespace rlrun::engine::cpu
