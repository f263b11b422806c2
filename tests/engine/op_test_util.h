// op_test_util.h - what the op tests share: a fixture parametrised over every backend of this
// build, host<->backend helpers, double-precision reference ops and central finite differences.
//
// Every backend runs the same cases (ops_forward_test.cc, ops_grad_test.cc). Inputs are drawn
// already representable in the backend's compute dtype (random_input), so the backend and the
// double-precision reference see identical values and only the arithmetic differs; results are
// compared with tol(f32, bf16): each test's own tolerance on f32 backends (the CPU), the named
// bf16 tolerances below on bf16 backends (CUDA). A backend that cannot be created here (cuda
// on a machine without a GPU) skips every case, visibly.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine::testing {

using Vec = std::vector<double>;

// Uniform values in [lo, hi) from a fixed seed.
inline Vec random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// The CPU backend with its baseline x86-64 kernels (no AVX2/FMA variants), tested beside "cpu".
inline const std::string kCpuBaseline = "cpu-baseline";

// Tolerances on bf16 backends, in rel_error units (largest absolute error over the largest
// |reference|, at least 1). Inputs are bf16 values, arithmetic is f32, and bf16 outputs are
// rounded once (2^-9 relative):
constexpr double kBf16Out = 1e-2;    // an output stored in bf16: one rounding plus f32 order effects
constexpr double kBf16Chain = 3e-2;  // bf16 outputs computed from bf16 intermediates (attention backward,
                                     // from the forward's bf16 out; rope forward then backward)
constexpr double kBf16Stat = 1e-4;   // f32 statistics and log-probs computed in f32 (rstd, lse, entropy)
constexpr double kBf16Grad = 1e-3;   // f32 gradients summed over bf16 rows (atomics: the order varies)
// Attention's lse: scores are f32 dot products of bf16 rows, exponentials the device's fast ones.
constexpr double kBf16AttentionLse = 1e-3;

// Every backend of this build (available_backends(): cuda too where it is built), plus the CPU
// baseline-kernel variant. The CUDA instances carry the ctest label `gpu` (tests/engine/
// CMakeLists.txt) and skip where no device exists.
inline std::vector<std::string> backends_under_test() {
  std::vector<std::string> names = available_backends();
  names.push_back(kCpuBaseline);
  return names;
}

// gtest parameter names allow only [A-Za-z0-9_]: "cpu-baseline" -> "cpu_baseline".
inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == '-' || c == ':') c = '_';
  return name;
}

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == kCpuBaseline) {
      auto cpu = std::make_unique<cpu::CpuBackend>(2);
      cpu->set_baseline_kernels(true);
      backend_ = std::move(cpu);
    } else {
      auto created = create_backend(GetParam(), 2);
      if (!created.ok() && created.status().code() == StatusCode::kUnavailable)  // no device here
        GTEST_SKIP() << GetParam() << " backend unavailable: " << created.status().to_string();
      ASSERT_TRUE(created.ok()) << created.status().to_string();
      backend_ = std::move(created.value());
    }
    if (auto* cpu = dynamic_cast<cpu::CpuBackend*>(backend_.get())) cpu->set_min_parallel_work(0);  // 2 threads always
  }

  Backend& be() { return *backend_; }
  bool is_bf16() const { return backend_->compute_dtype() == DType::kBF16; }
  // The tolerance of a comparison: `f32` on f32 backends, `bf16` (one of the kBf16 constants) on
  // bf16 ones.
  double tol(double f32, double bf16) const { return is_bf16() ? bf16 : f32; }

  // values rounded to what the compute dtype holds (bf16, or f32 on the CPU).
  Vec representable(Vec values) const {
    for (double& x : values) {
      const float f = static_cast<float>(x);
      x = is_bf16() ? bf16_to_f32(f32_to_bf16(f)) : f;
    }
    return values;
  }
  // Uniform values in [lo, hi) from a fixed seed, representable in the compute dtype.
  Vec random_input(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) const {
    return representable(random_vec(n, seed, lo, hi));
  }
  // f32 and the compute dtype: the dtypes matmul's out and the elementwise ops accept.
  std::vector<DType> float_dtypes() const {
    if (!is_bf16()) return {DType::kF32};
    return {DType::kBF16, DType::kF32};
  }

  // A tensor in the compute dtype holding `values`.
  Tensor upload(Shape shape, const Vec& values) { return upload_as(backend_->compute_dtype(), shape, values); }
  Tensor upload_as(DType dtype, Shape shape, const Vec& values) {
    std::vector<float> f(values.begin(), values.end());
    Tensor host_f32 = from_host(*backend_, shape, f);
    if (dtype == DType::kF32) return host_f32;
    Tensor t = backend_->zeros(shape, dtype);
    backend_->convert(t, host_f32);
    return t;
  }
  Tensor upload_f32(Shape shape, const Vec& values) {  // always f32 (stats, master weights)
    std::vector<float> f(values.begin(), values.end());
    return from_host(*backend_, shape, f);
  }
  Tensor upload_i32(Shape shape, const std::vector<int32_t>& values) { return from_host_i32(*backend_, shape, values); }
  Tensor zeros(Shape shape) { return backend_->zeros(shape, backend_->compute_dtype()); }
  Tensor zeros_f32(Shape shape) { return backend_->zeros(shape, DType::kF32); }
  static Vec download(const Tensor& t) {
    std::vector<float> f = to_host_f32(t);
    return Vec(f.begin(), f.end());
  }

  std::unique_ptr<Backend> backend_;
};

// max |got - want| / max(1, max |want|): an error relative to the size of the reference.
inline double rel_error(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = 1.0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

#define EXPECT_CLOSE(got, want, tol) EXPECT_LE(rel_error((got), (want)), (tol)) << "tolerance " << (tol)

// Central differences of a scalar function f at x, in double: step h, error O(h^2).
inline Vec finite_diff(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-5) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f(x);
    x[i] = saved - h;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace rlrun::engine::testing

#include "tests/engine/op_reference.h"  // IWYU pragma: export
