// cpu_matmul.cc - the backend's matmul: blocks of the product over the backend's threads, each an
// fp32 sgemm (oneDNN, cpu_gemm.h), a few-rows kernel of ours (cpu_gemm_nt.h), or a bf16 product
// with fp32 sums and output (cpu_gemm_bf16.cc): of the operands rounded once to bf16 with
// set_matmul_bf16, or of bf16 weights as they are stored (bf16-frozen, model/weights.h) and the
// activations rounded.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "engine/bf16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

namespace {

// out[j] = bf16(in[j]) for j < n.
RLRUN_CPU_INLINE void to_bf16_body(uint16_t* out, const float* in, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] = f32_to_bf16(in[j]);
}
RLRUN_CPU_AVX2 void to_bf16_avx2(uint16_t* out, const float* in, int64_t n) { to_bf16_body(out, in, n); }
void to_bf16_base(uint16_t* out, const float* in, int64_t n) { to_bf16_body(out, in, n); }

// The rounded operands of a product, per thread: a buffer is reused by the next product rather
// than mapped, faulted in and zeroed anew each time; one larger than kKeptBytes (an LM head's
// gradient) is freed after its product.
class Bf16Scratch {
 public:
  static constexpr size_t kKeptBytes = size_t{64} << 20;
  uint16_t* get(size_t n) {
    if (n > size_) {
      data_.reset(new uint16_t[n]);  // not value-initialized: every element is written before it is read
      size_ = n;
    }
    return data_.get();
  }
  void trim() {
    if (size_ * sizeof(uint16_t) > kKeptBytes) data_.reset(), size_ = 0;
  }

 private:
  std::unique_ptr<uint16_t[]> data_;
  size_t size_ = 0;
};

}  // namespace

MatmulBlocks matmul_blocks(int64_t m, int64_t n, int64_t k, int threads) {
  // Below this one call is faster. Low: a decode step's products at batch 1 (576 x 576 on
  // SmolLM2) are bound by streaming their weights, which two cores do faster than one.
  constexpr double kMinParallelFlops = 3e5;
  constexpr int64_t kMinBlock = 32;          // rows or columns: the kernels stay efficient
  constexpr int64_t kBlocksPerThread = 2;    // a thread held up by another process costs half a share
  MatmulBlocks b;
  b.split_rows = m >= n;
  const int64_t dim = b.split_rows ? m : n;
  b.size = dim;
  if (threads <= 1 || 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kMinParallelFlops)
    return b;
  const int64_t wanted = std::min<int64_t>(dim / kMinBlock, threads * kBlocksPerThread);
  if (wanted <= 1) return b;
  b.size = (dim + wanted - 1) / wanted;
  b.size = (b.size + 15) / 16 * 16;  // whole vector widths of the kernels
  b.count = (dim + b.size - 1) / b.size;
  return b;
}

bool CpuBackend::set_matmul_bf16(bool on) {
  if (on && !bf16_gemm_native()) return false;
  matmul_bf16_ = on;
  return true;
}

void CpuBackend::matmul_impl(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                             float alpha, float beta) {
  const int64_t m = trans_a ? a.shape().cols() : a.shape().rows();
  const int64_t k = trans_a ? a.shape().rows() : a.shape().cols();
  const int64_t n = trans_b ? b.shape().rows() : b.shape().cols();
  const int64_t lda = a.shape().cols(), ldb = b.shape().cols();
  const auto start = std::chrono::steady_clock::now();
  struct Count {  // on every return
    MatmulStats& stats;
    double flops;
    std::chrono::steady_clock::time_point start;
    ~Count() {
      stats.flops += flops;
      ++stats.calls;
      stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } count{matmul_stats_, 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k), start};
  const float* pa = a.f32();
  // bf16-frozen weights (backend.h): B is bf16 already and every product runs in bf16, few rows too.
  const bool b_bf16 = b.dtype() == DType::kBF16;
  const float* pb = b_bf16 ? nullptr : b.f32();
  float* pc = out.f32();
  // A few rows against a weight matrix (x W^T, a decode step): no packing (cpu_gemm_nt.h).
  const bool nt = !b_bf16 && !trans_a && trans_b && m <= gemm_nt_max_rows(gemm_nt_);
  // bf16: the f32 operands rounded once, each in its own layout (row by row, in contiguous runs).
  // compute_dtype: bf16 keeps products of few rows in fp32: rounding the weights would cost as
  // much as multiplying them (bf16 weights need no rounding).
  const bool bf16 = b_bf16 || (matmul_bf16_ && !nt && m >= kBf16MinRows);
  thread_local Bf16Scratch a_scratch, b_scratch;
  struct Trim {  // on every return
    ~Trim() { a_scratch.trim(), b_scratch.trim(); }
  } trim;
  uint16_t* a16 = nullptr;
  uint16_t* b16 = nullptr;
  if (bf16) {
    a16 = a_scratch.get(static_cast<size_t>(m * k));
    auto convert = avx2_ ? to_bf16_avx2 : to_bf16_base;
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
#pragma omp parallel for num_threads(threads_for(m * k)) schedule(static)
    for (int64_t i = 0; i < a_rows; ++i) convert(a16 + i * a_cols, pa + i * lda, a_cols);
    if (!b_bf16) {
      b16 = b_scratch.get(static_cast<size_t>(k * n));
      const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
#pragma omp parallel for num_threads(threads_for(k * n)) schedule(static)
      for (int64_t i = 0; i < b_rows; ++i) convert(b16 + i * b_cols, pb + i * ldb, b_cols);
    }
  }
  const uint16_t* pb16 = b_bf16 ? b.bf16() : b16;
  // out[rows, cols] of one block: rows [r0, r0 + rm) and columns [c0, c0 + cn).
  auto gemm = [&](int64_t r0, int64_t rm, int64_t c0, int64_t cn) {
    if (nt)
      return gemm_nt(gemm_nt_, rm, cn, k, alpha, pa + r0 * lda, lda, pb + c0 * ldb, ldb, beta, pc + r0 * n + c0, n);
    if (bf16)
      return gemm_bf16(trans_a, trans_b, rm, cn, k, alpha, a16 + (trans_a ? r0 : r0 * k), trans_a ? m : k,
                       pb16 + (trans_b ? c0 * k : c0), trans_b ? k : n, beta, pc + r0 * n + c0, n);
    sgemm(trans_a, trans_b, rm, cn, k, alpha, pa + (trans_a ? r0 : r0 * lda), lda, pb + (trans_b ? c0 * ldb : c0),
          ldb, beta, pc + r0 * n + c0, n);
  };
  const MatmulBlocks blocks = matmul_blocks(m, n, k, num_threads_);
  if (blocks.count <= 1) return gemm(0, m, 0, n);
  const int64_t dim = blocks.split_rows ? m : n;
#pragma omp parallel for num_threads(static_cast<int>(std::min<int64_t>(num_threads_, blocks.count))) schedule(dynamic, 1)
  for (int64_t i = 0; i < blocks.count; ++i) {
    const int64_t lo = i * blocks.size, len = std::min(blocks.size, dim - lo);
    if (blocks.split_rows)
      gemm(lo, len, 0, n);
    else
      gemm(0, m, lo, len);
  }
}

}  // namespace rlrun::engine::cpu
