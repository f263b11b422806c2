// cpu_backend.cc - memory, copies, elementwise ops and the optimizer. Each op's
// contract (dtypes, shapes, aliasing) has been checked by Backend (backend.cc) before it gets here.
#include "engine/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "engine/cpu/cpu_gemm_nt.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

namespace {
constexpr size_t kAlign = 256;  // also the header that remembers each block's size
}  // namespace

CpuBackend::CpuBackend(int num_threads) : avx2_(cpu_has_avx2_fma()), gemm_nt_(gemm_nt_isa()) {
  set_num_threads(num_threads);
}

void CpuBackend::set_baseline_kernels(bool baseline) {
  avx2_ = !baseline && cpu_has_avx2_fma();
  gemm_nt_ = baseline ? GemmNtIsa::kNone : gemm_nt_isa();
}

void CpuBackend::set_num_threads(int n) {
  num_threads_ = n > 0 ? n : omp_get_num_procs();
}

bool CpuBackend::set_compute_threads(int n) {
  if (n < 1 || n > kMaxThreads) return false;
  set_num_threads(n);
  return true;
}

// ---- memory -------------------------------------------------------------------------------------

void* CpuBackend::raw_alloc(size_t bytes) {
  void* block = raw_alloc_uninitialized(bytes);
  std::memset(block, 0, bytes);
  return block;
}

void* CpuBackend::raw_alloc_uninitialized(size_t bytes) {
  const size_t total = kAlign + (bytes + kAlign - 1) / kAlign * kAlign;
  char* base = static_cast<char*>(std::aligned_alloc(kAlign, total));
  RLRUN_CHECK(base != nullptr, "cpu: out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memcpy(base, &bytes, sizeof bytes);
  if (poison_uninitialized_) std::memset(base + kAlign, 0xff, bytes);
  const size_t now = bytes_in_use_.fetch_add(bytes) + bytes;
  size_t peak = peak_bytes_.load();
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
  return base + kAlign;
}

void CpuBackend::raw_free(void* ptr) {
  if (ptr == nullptr) return;
  char* base = static_cast<char*>(ptr) - kAlign;
  size_t bytes;
  std::memcpy(&bytes, base, sizeof bytes);
  bytes_in_use_.fetch_sub(bytes);
  std::free(base);
}

// ---- copies ---------------------------------------------------------------------------------------

void CpuBackend::copy_from_host_impl(const Tensor& dst, const void* src, size_t bytes) {
  std::memcpy(dst.data(), src, bytes);
}

void CpuBackend::copy_to_host_impl(void* dst, const Tensor& src, size_t bytes) {
  std::memcpy(dst, src.data(), bytes);
}

void CpuBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  std::memmove(dst.data(), src.data(), src.nbytes());
}

void CpuBackend::fill_zero_impl(const Tensor& t) {
  std::memset(t.data(), 0, t.nbytes());
}

void CpuBackend::convert_impl(const Tensor& dst, const Tensor& src) {
  const int64_t n = src.numel();
  if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    const float* s = src.f32();
    uint16_t* d = dst.bf16();
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
  } else {  // bf16 -> f32
    const uint16_t* s = src.bf16();
    float* d = dst.f32();
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  }
}

// ---- dense algebra ----------------------------------------------------------------------------------

void CpuBackend::add_bias_impl(const Tensor& out, const Tensor& bias) {
  const int64_t rows = out.shape().rows(), cols = out.shape().cols();
  float* o = out.f32();
  const float* b = bias.f32();
#pragma omp parallel for num_threads(threads_for(rows * cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = o + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] += b[c];
  }
}

void CpuBackend::add_bias_backward_impl(const Tensor& dbias, const Tensor& dout) {
  const int64_t rows = dout.shape().rows(), cols = dout.shape().cols();
  float* db = dbias.f32();
  const float* d = dout.f32();
  // Columns are split across threads; each thread sums its columns over all rows in double.
#pragma omp parallel for num_threads(threads_for(rows * cols)) schedule(static)
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += d[r * cols + c];
    db[c] += static_cast<float>(s);
  }
}

// ---- elementwise --------------------------------------------------------------------------------------

void CpuBackend::add_impl(const Tensor& out, const Tensor& a, const Tensor& b) {
  float* o = out.f32();
  const float *x = a.f32(), *y = b.f32();
  const int64_t n = out.numel();
#pragma omp parallel for simd num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void CpuBackend::axpy_impl(const Tensor& y, float alpha, const Tensor& x) {
  float* yy = y.f32();
  const float* xx = x.f32();
  const int64_t n = y.numel();
#pragma omp parallel for simd num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) yy[i] += alpha * xx[i];
}

void CpuBackend::scale_impl(const Tensor& x, float alpha) {
  float* xx = x.f32();
  const int64_t n = x.numel();
#pragma omp parallel for simd num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) xx[i] *= alpha;
}

// ---- optimizer ------------------------------------------------------------------------------------------

void CpuBackend::adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                                 const AdamWParams& p) {
  const double t = static_cast<double>(p.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), t));
  float *w = param.f32(), *mm = m.f32(), *vv = v.f32();
  const float* g = grad.f32();
  const int64_t n = param.numel();
#pragma omp parallel for simd num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = p.beta1 * mm[i] + (1.0f - p.beta1) * gi;
    const float vi = p.beta2 * vv[i] + (1.0f - p.beta2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    const float update = (mi / bc1) / (std::sqrt(vi / bc2) + p.eps);
    w[i] -= p.lr * (update + p.weight_decay * w[i]);
  }
}

double CpuBackend::sum_squares_impl(const Tensor& x) {
  const float* xx = x.f32();
  const int64_t n = x.numel();
  double total = 0.0;
#pragma omp parallel for simd num_threads(threads_for(n)) schedule(static) reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(xx[i]) * xx[i];
  return total;
}

}  // namespace rlrun::engine::cpu
