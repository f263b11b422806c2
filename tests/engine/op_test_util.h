// op_test_util.h - what the op tests share: a fixture parametrised over every backend of this
// build, host<->backend helpers, double-precision reference ops and central finite differences.
//
// Every backend runs the same cases. Inputs are generated in double, uploaded in the backend's
// compute dtype, and results compared against double references with a tolerance scaled by the
// backend's precision (f32: tol_scale 1; bf16 backends widen it).
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

// The CPU backend with its baseline x86-64 kernels (no AVX2/FMA variants), tested beside "cpu".
inline const std::string kCpuBaseline = "cpu-baseline";

// Every host backend of this build, plus the CPU baseline-kernel variant. Device backends (cuda)
// run every op against the CPU in cuda_conformance_test.cc, which carries the ctest label `gpu`
// and skips where no device exists.
inline std::vector<std::string> backends_under_test() {
  std::vector<std::string> names;
  for (const std::string& name : available_backends())
    if (name != "cuda") names.push_back(name);
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
      ASSERT_TRUE(created.ok()) << created.status().to_string();
      backend_ = std::move(created.value());
    }
    if (auto* cpu = dynamic_cast<cpu::CpuBackend*>(backend_.get())) cpu->set_min_parallel_work(0);  // 2 threads always
    tol_scale_ = backend_->compute_dtype() == DType::kF32 ? 1.0 : 100.0;
  }

  Backend& be() { return *backend_; }

  // A tensor in the compute dtype holding `values`.
  Tensor upload(Shape shape, const Vec& values) {
    std::vector<float> f(values.begin(), values.end());
    Tensor host_f32 = from_host(*backend_, shape, f);
    if (backend_->compute_dtype() == DType::kF32) return host_f32;
    Tensor t = backend_->zeros(shape, backend_->compute_dtype());
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
  double tol_scale_ = 1.0;
};

// Uniform values in [lo, hi) from a fixed seed.
inline Vec random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

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
