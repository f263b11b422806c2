// cuda_backend.h - the CUDA backend: bf16 compute with f32 accumulation, f32 master weights,
// gradients and optimizer state (dtype rules in engine/backend.h).
//
// Memory comes from a CachingAllocator over expandable segments (engine/caching_allocator.h,
// backed by the CUDA virtual memory API); matmuls go through cuBLASLt (matmul.h); every other op
// is one of our kernels (kernels.h, one .cu file per idea). Every op is enqueued on the backend's
// one stream, so ops run in issue order and a freed block may be reused at once.
//
// Dtypes, shapes and aliasing are checked by Backend (backend.cc) before any op gets here; with
// compute_dtype() bf16 the contract accepts:
//   matmul        a, b both bf16 (out bf16 or f32, e.g. f32 weight gradients) or both f32 (out f32)
//   add/axpy/scale, sum_squares   f32 or bf16;   adamw_step  f32
//   every other op: activations and weights bf16; saved statistics, log-probs and parameter
//   gradients (dweight, dtable, dbias) f32; ids, positions, cu_seqlens, block tables i32.
// This backend's own limits abort the same way, naming the op: rmsnorm_backward's hidden size
// (kRmsNormMaxHidden), attention's head dim (kAttentionMaxHeadDim) and at most 65535 sequences
// or kv heads per launch. Device-side input errors (an id outside the vocabulary, a KV slot
// outside the cache, cu_seqlens out of order) are flagged by the kernels and abort, naming the
// op, at the next synchronize / copy_to_host / sum_squares.
//
// This header includes no CUDA header (tests and benchmarks include it); cuda_backend.cc does.
// Threads: one host thread drives a CudaBackend at a time (backend.h); it makes its device current
// on every entry point, so several backends on several devices may share a thread.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/caching_allocator.h"

struct CUstream_st;  // cudaStream_t

namespace rlrun::engine::cuda {

class Matmul;

class CudaBackend final : public Backend {
 public:
  // Fails when the device does not exist or cannot be initialised.
  static Result<std::unique_ptr<CudaBackend>> create(int device);
  ~CudaBackend() override;

  int device() const { return device_; }
  CUstream_st* stream() const { return stream_; }
  AllocatorStats memory_stats() const { return allocator_->stats(); }
  size_t empty_cache() { return allocator_->empty_cache(); }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  bool is_host() const override { return false; }
  DType compute_dtype() const override { return DType::kBF16; }

  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  size_t bytes_in_use() const override { return allocator_->stats().allocated; }
  size_t peak_bytes() const override { return allocator_->stats().peak_allocated; }

  void synchronize() override;

  // Aborts when a kernel since the last check flagged bad input (see above). Synchronizes.
  void check_device_errors();

 private:
  // The ops (backend.h has checked each call's contract): a launch of the op's kernel, after
  // the limits of this backend's kernels above.
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

  CudaBackend(int device, CUstream_st* stream, std::unique_ptr<CachingAllocator> allocator);
  void make_current() const;

  int device_;
  CUstream_st* stream_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<Matmul> matmul_;
  void* matmul_workspace_ = nullptr;  // device, owned (cuBLASLt's scratch)
  int* error_flags_ = nullptr;  // device int, OR-ed DeviceError bits (kernels.h)
  double* partials_ = nullptr;  // device (kSumSquaresMaxBlocks): sum_squares block sums
  float* attention_delta_ = nullptr;  // device scratch for attention_backward, grown on demand
  size_t attention_delta_elems_ = 0;
};

}  // namespace rlrun::engine::cuda
