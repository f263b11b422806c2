// cpu_backend.h - the reference backend: fp32 on the host, oneDNN's sgemm for matmuls (cpu_gemm.h;
// a kernel of our own for forward products of few rows, cpu_gemm_nt.h), our own OpenMP loops for
// everything else.
//
// Threads: the thread count is set once (constructor or set_num_threads, or set_compute_threads
// between steps) and sizes every OpenMP region here. The GEMM library computes on the calling
// thread alone: a matmul is split into blocks of rows or columns of its output (matmul_blocks)
// that the region's threads take as they come free, each one single-threaded sgemm call. A
// library's own threading splits a product evenly over its threads, so one thread that shares its
// core with another process (the rollout worker beside the trainer) holds back the whole product;
// blocks taken as threads come free keep the process as fast as the cores it actually gets.
// Regions never nest.
#pragma once

#include <atomic>
#include <string>

#include "engine/backend.h"
#include "engine/cpu/cpu_gemm_nt.h"

namespace rlrun::engine::cpu {

// How a matmul (out m x n, inner dimension k) is split over `threads`: into `count` blocks of
// `size` rows (split_rows) or columns of the output, the last one possibly smaller. count 1: one
// call (small products, where waking threads would cost more than the product).
struct MatmulBlocks {
  bool split_rows = true;
  int64_t size = 0;
  int64_t count = 1;
};
MatmulBlocks matmul_blocks(int64_t m, int64_t n, int64_t k, int threads);

class CpuBackend final : public Backend {
 public:
  static constexpr int kMaxThreads = 1024;   // cpu_threads_per_worker's bound
  explicit CpuBackend(int num_threads = 0);  // 0: all hardware threads

  // Threads for matmuls and our loops. n <= 0 means all hardware threads.
  void set_num_threads(int n);
  int num_threads() const { return num_threads_; }
  // compute_dtype bf16: products of at least kBf16MinRows rows multiply bf16 roundings of their
  // operands, with fp32 sums and fp32 results (weights, activations and the optimizer stay fp32);
  // forward products that the few-rows kernel takes (decode steps) stay fp32.
  // Only where the CPU multiplies bf16 natively (bf16_gemm_native(), cpu_gemm.h): false elsewhere.
  static constexpr int64_t kBf16MinRows = 16;
  bool set_matmul_bf16(bool on) override;
  MatmulStats matmul_stats() const override { return matmul_stats_; }
  bool matmul_bf16() const { return matmul_bf16_; }
  // Hot loops use AVX2 + FMA variants when the CPU has them (cpu_math.h). Tests call this with
  // true to run the baseline x86-64 variants too.
  void set_baseline_kernels(bool baseline);
  bool avx2_kernels() const { return avx2_; }
  // Loops over fewer elements than this run on the calling thread alone (default 32768). Tests
  // set 0 so that their small cases still run the multi-threaded code paths.
  void set_min_parallel_work(int64_t work) { min_parallel_work_ = work; }
  // Tests set this so that uninitialized() tensors start as all-ones bytes (NaN floats, index -1)
  // and a read before the first write shows in their results.
  void set_poison_uninitialized(bool poison) { poison_uninitialized_ = poison; }

  int compute_threads() const override { return num_threads_; }
  bool set_compute_threads(int n) override;  // 1 .. kMaxThreads

  std::string name() const override { return "cpu"; }
  bool is_host() const override { return true; }
  DType compute_dtype() const override { return DType::kF32; }

  void* raw_alloc(size_t bytes) override;
  void* raw_alloc_uninitialized(size_t bytes) override;
  void raw_free(void* ptr) override;
  size_t bytes_in_use() const override { return bytes_in_use_.load(); }
  size_t peak_bytes() const override { return peak_bytes_.load(); }

  void synchronize() override {}

 private:
  // The ops: backend.h has checked each call's contract; these add only the checks that read the
  // data (ids, targets, cu_seqlens, block tables).
  void copy_from_host_impl(const Tensor& dst, const void* src, size_t bytes) override;
  void copy_to_host_impl(void* dst, const Tensor& src, size_t bytes) override;
  void copy_impl(const Tensor& dst, const Tensor& src) override;
  void fill_zero_impl(const Tensor& t) override;
  void convert_impl(const Tensor& dst, const Tensor& src) override;

  void matmul_impl(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                   float beta) override;
  void add_bias_impl(const Tensor& out, const Tensor& bias) override;
  void add_bias_backward_impl(const Tensor& dbias, const Tensor& dout) override;

  void add_impl(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void axpy_impl(const Tensor& y, float alpha, const Tensor& x) override;
  void scale_impl(const Tensor& x, float alpha) override;

  void embedding_forward_impl(const Tensor& out, const Tensor& table, const Tensor& ids) override;
  void embedding_backward_impl(const Tensor& dtable, const Tensor& dout, const Tensor& ids) override;

  void rmsnorm_forward_impl(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                            float eps, float offset) override;
  void rmsnorm_backward_impl(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                             const Tensor& weight, const Tensor& rstd, float offset) override;

  void rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, float scale) override;
  void rope_backward_impl(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq, float scale) override;

  void attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window,
                              const Tensor& q_begin) override;
  void attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window,
                               const Tensor& q_begin) override;

  void paged_attention_forward_impl(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                    const Tensor& cu_q, const Tensor& seq_start, const Tensor& block_tables,
                                    int64_t block_size, int64_t max_context, int64_t window) override;

  void geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                           const Tensor& up) override;
  void swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                            const Tensor& up) override;

  void logprob_forward_impl(const Tensor& logprob, const Tensor& entropy, const Tensor& lse, const Tensor& logits,
                            const Tensor& targets) override;
  void logprob_backward_impl(const Tensor& dlogits, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                             const Tensor& entropy, const Tensor& dlogprob, const Tensor& dentropy) override;

  void adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWParams& p) override;
  double sum_squares_impl(const Tensor& x) override;

  // Threads for a loop over `work` elements: small loops (decode steps, biases) run on the calling
  // thread alone, where waking a team would cost more than the loop (and much more on a busy
  // machine, where a team waits for its slowest thread to be scheduled).
  int threads_for(int64_t work) const { return work >= min_parallel_work_ ? num_threads_ : 1; }

  int64_t min_parallel_work_ = 1 << 15;
  bool poison_uninitialized_ = false;
  int num_threads_ = 1;
  bool avx2_ = false;
  bool matmul_bf16_ = false;
  MatmulStats matmul_stats_;  // matmul_impl runs on the calling thread, which owns it
  GemmNtIsa gemm_nt_ = GemmNtIsa::kNone;  // matmul's few-rows kernel (cpu_gemm_nt.h)
  std::atomic<size_t> bytes_in_use_{0};
  std::atomic<size_t> peak_bytes_{0};
};

}  // namespace rlrun::engine::cpu
