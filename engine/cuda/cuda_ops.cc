// cuda_ops.cc - the layer ops of CudaBackend: one launch of the op's kernel (kernels.h), after
// the kernel's own limits. Shapes and dtypes have been checked by Backend (backend.cc).
#include <cuda_runtime.h>

#include <algorithm>

#include "common/check.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

bf16* bf(const Tensor& t) { return static_cast<bf16*>(t.data()); }
float* f32(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data()) : nullptr; }
const int32_t* i32(const Tensor& t) { return static_cast<const int32_t*>(t.data()); }

}  // namespace

// ---- embedding ------------------------------------------------------------------------------------

void CudaBackend::embedding_forward_impl(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t vocab = table.shape().rows(), h = table.shape().cols(), n = ids.numel();
  make_current();
  cuda::embedding_forward(bf(out), bf(table), i32(ids), n, h, vocab, error_flags_, stream_);
}

void CudaBackend::embedding_backward_impl(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const int64_t vocab = dtable.shape().rows(), h = dtable.shape().cols(), n = ids.numel();
  make_current();
  cuda::embedding_backward(f32(dtable), bf(dout), i32(ids), n, h, vocab, error_flags_, stream_);
}

// ---- RMSNorm ----------------------------------------------------------------------------------------

void CudaBackend::rmsnorm_forward_impl(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                                       float eps, float offset) {
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  make_current();
  cuda::rmsnorm_forward(bf(out), f32(rstd), bf(x), bf(weight), n, h, eps, offset, stream_);
}

void CudaBackend::rmsnorm_backward_impl(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                                        const Tensor& weight, const Tensor& rstd, float offset) {
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  RLRUN_CHECK(h <= kRmsNormMaxHidden, "rmsnorm_backward: hidden size " + std::to_string(h) + " > " +
                                          std::to_string(kRmsNormMaxHidden) + " (the kernel's shared-memory sum)");
  make_current();
  cuda::rmsnorm_backward(bf(dx), f32(dweight), bf(dout), bf(x), bf(weight), f32(rstd), n, h, offset, stream_);
}

// ---- rotary embedding ---------------------------------------------------------------------------------

void CudaBackend::rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, float scale) {
  make_current();
  cuda::rope(bf(x), i32(positions), f32(inv_freq), x.dim(0), x.dim(1), x.dim(2), scale,
             1.0f, stream_);
}

void CudaBackend::rope_backward_impl(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq, float scale) {
  make_current();
  cuda::rope(bf(dx), i32(positions), f32(inv_freq), dx.dim(0), dx.dim(1), dx.dim(2),
             scale, -1.0f, stream_);
}

// ---- attention -------------------------------------------------------------------------------------------

namespace {

// The launch dimensions of q (N, Hq, D), k (N or slots, Hkv, D) and the cu tensor (S+1), whose
// shapes Backend has checked, after the kernels' own limits: head dim and grid size.
AttentionDims attention_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& cu, int64_t max_rows) {
  RLRUN_CHECK(q.dim(2) > 0 && q.dim(2) <= kAttentionMaxHeadDim,
              std::string(op) + ": head dim " + std::to_string(q.dim(2)) + " (at most " +
                  std::to_string(kAttentionMaxHeadDim) + " on CUDA)");
  RLRUN_CHECK(cu.dim(0) - 1 <= 65535 && k.dim(1) <= 65535, std::string(op) + ": more than 65535 sequences or kv heads");
  AttentionDims d;
  d.n = q.dim(0);
  d.hq = static_cast<int>(q.dim(1));
  d.hkv = static_cast<int>(k.dim(1));
  d.d = static_cast<int>(q.dim(2));
  d.num_seqs = static_cast<int>(cu.dim(0) - 1);
  d.max_rows = max_rows;
  return d;
}

}  // namespace

// q_begin: every row is a query here (backend.h: exact; the rows before it have a zero dout, so
// their dq is zero).
void CudaBackend::attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen,
                                         int64_t window, const Tensor& /*q_begin*/) {
  AttentionDims d = attention_dims("attention_forward", q, k, cu_seqlens, max_seqlen);
  d.window = window;
  make_current();
  cuda::attention_forward(bf(out), f32(lse), bf(q), bf(k), bf(v), i32(cu_seqlens), d, error_flags_, stream_);
}

void CudaBackend::attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                          const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                                          int64_t window, const Tensor& /*q_begin*/) {
  AttentionDims d = attention_dims("attention_backward", q, k, cu_seqlens, max_seqlen);
  d.window = window;
  make_current();
  const size_t delta_elems = static_cast<size_t>(d.n) * d.hq;
  if (delta_elems > attention_delta_elems_) {  // scratch kept across calls: one per training step size
    raw_free(attention_delta_);
    attention_delta_ = static_cast<float*>(raw_alloc(delta_elems * sizeof(float)));
    attention_delta_elems_ = delta_elems;
  }
  cuda::attention_backward(bf(dq), bf(dk), bf(dv), attention_delta_, bf(dout), bf(q), bf(k), bf(v), bf(out), f32(lse),
                           i32(cu_seqlens), d, error_flags_, stream_);
}

void CudaBackend::paged_attention_forward_impl(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                               const Tensor& v_cache, const Tensor& cu_q, const Tensor& seq_start,
                                               const Tensor& block_tables, int64_t block_size, int64_t max_context,
                                               int64_t window) {
  // A sequence has at most min(N, max_context) new rows: the launch covers that many.
  AttentionDims d = attention_dims("paged_attention_forward", q, k_cache, cu_q, std::min(q.dim(0), max_context));
  d.window = window;
  PagedKv kv;
  kv.k_cache = bf(k_cache);
  kv.v_cache = bf(v_cache);
  kv.seq_start = i32(seq_start);
  kv.block_tables = i32(block_tables);
  kv.max_blocks = block_tables.dim(1);
  kv.block_size = block_size;
  kv.num_slots = k_cache.dim(0);
  make_current();
  cuda::paged_attention_forward(bf(out), bf(q), i32(cu_q), kv, d, error_flags_, stream_);
}

// ---- SwiGLU ---------------------------------------------------------------------------------------------------

void CudaBackend::geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  make_current();
  cuda::geglu_forward(bf(out), bf(gate), bf(up), gate.numel(), stream_);
}

void CudaBackend::geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                      const Tensor& up) {
  make_current();
  cuda::geglu_backward(bf(dgate), bf(dup), bf(dout), bf(gate), bf(up), gate.numel(), stream_);
}

void CudaBackend::swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  make_current();
  cuda::swiglu_forward(bf(out), bf(gate), bf(up), gate.numel(), stream_);
}

void CudaBackend::swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                       const Tensor& up) {
  make_current();
  cuda::swiglu_backward(bf(dgate), bf(dup), bf(dout), bf(gate), bf(up), gate.numel(), stream_);
}

// ---- fused log-softmax + gather + entropy ------------------------------------------------------------------------

void CudaBackend::logprob_forward_impl(const Tensor& logprob, const Tensor& entropy, const Tensor& lse,
                                       const Tensor& logits, const Tensor& targets) {
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  make_current();
  cuda::logprob_forward(f32(logprob), f32(entropy), f32(lse), bf(logits), i32(targets), n, vocab, error_flags_,
                        stream_);
}

void CudaBackend::logprob_backward_impl(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                        const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                                        const Tensor& dentropy) {
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  make_current();
  cuda::logprob_backward(bf(dlogits), bf(logits), i32(targets), f32(lse), f32(entropy), f32(dlogprob), f32(dentropy),
                         n, vocab, stream_);
}

}  // namespace rlrun::engine::cuda
