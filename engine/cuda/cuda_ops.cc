// cuda_ops.cc - the layer ops of CudaBackend: shape and dtype checks (the same contracts as the
// CPU backend, engine/backend.h), then one launch of the op's kernel (kernels.h).
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

void CudaBackend::embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) {
  expect("embedding_forward", "table", table, DType::kBF16);
  const int64_t vocab = table.shape().rows(), h = table.shape().cols(), n = ids.numel();
  expect("embedding_forward", "ids", ids, Shape{n}, DType::kI32);
  expect("embedding_forward", "out", out, Shape{n, h}, DType::kBF16);
  make_current();
  cuda::embedding_forward(bf(out), bf(table), i32(ids), n, h, vocab, error_flags_, stream_);
}

void CudaBackend::embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  expect("embedding_backward", "dtable", dtable, DType::kF32);
  const int64_t vocab = dtable.shape().rows(), h = dtable.shape().cols(), n = ids.numel();
  expect("embedding_backward", "ids", ids, Shape{n}, DType::kI32);
  expect("embedding_backward", "dout", dout, Shape{n, h}, DType::kBF16);
  make_current();
  cuda::embedding_backward(f32(dtable), bf(dout), i32(ids), n, h, vocab, error_flags_, stream_);
}

// ---- RMSNorm ----------------------------------------------------------------------------------------

void CudaBackend::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                                  float eps) {
  expect("rmsnorm_forward", "x", x, DType::kBF16);
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  expect("rmsnorm_forward", "out", out, x.shape(), DType::kBF16);
  expect("rmsnorm_forward", "weight", weight, Shape{h}, DType::kBF16);
  if (rstd.defined()) expect("rmsnorm_forward", "rstd", rstd, Shape{n}, DType::kF32);
  make_current();
  cuda::rmsnorm_forward(bf(out), f32(rstd), bf(x), bf(weight), n, h, eps, stream_);
}

void CudaBackend::rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                                   const Tensor& weight, const Tensor& rstd) {
  expect("rmsnorm_backward", "x", x, DType::kBF16);
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  RLRUN_CHECK(h <= kRmsNormMaxHidden, "rmsnorm_backward: hidden size " + std::to_string(h) + " > " +
                                          std::to_string(kRmsNormMaxHidden) + " (the kernel's shared-memory sum)");
  expect("rmsnorm_backward", "dx", dx, x.shape(), DType::kBF16);
  expect("rmsnorm_backward", "dout", dout, x.shape(), DType::kBF16);
  expect("rmsnorm_backward", "weight", weight, Shape{h}, DType::kBF16);
  expect("rmsnorm_backward", "dweight", dweight, Shape{h}, DType::kF32);
  expect("rmsnorm_backward", "rstd", rstd, Shape{n}, DType::kF32);
  make_current();
  cuda::rmsnorm_backward(bf(dx), f32(dweight), bf(dout), bf(x), bf(weight), f32(rstd), n, h, stream_);
}

// ---- rotary embedding ---------------------------------------------------------------------------------

namespace {

void rope_check(const CudaBackend& b, const char* op, const Tensor& x, const Tensor& positions) {
  RLRUN_CHECK(x.defined() && x.backend() == &b && x.dtype() == DType::kBF16 && x.rank() == 3 && x.dim(2) % 2 == 0,
              std::string(op) + ": x must be bf16 (N, H, D) with even D on " + b.name() + ", got " + x.str());
  RLRUN_CHECK(positions.defined() && positions.backend() == &b && positions.dtype() == DType::kI32 &&
                  positions.shape() == Shape{x.dim(0)},
              std::string(op) + ": positions is " + positions.str() + ", expected i32(" + std::to_string(x.dim(0)) + ")");
}

}  // namespace

void CudaBackend::rope_forward(const Tensor& x, const Tensor& positions, float theta) {
  rope_check(*this, "rope_forward", x, positions);
  make_current();
  cuda::rope(bf(x), i32(positions), x.dim(0), x.dim(1), x.dim(2), theta, 1.0f, stream_);
}

void CudaBackend::rope_backward(const Tensor& dx, const Tensor& positions, float theta) {
  rope_check(*this, "rope_backward", dx, positions);
  make_current();
  cuda::rope(bf(dx), i32(positions), dx.dim(0), dx.dim(1), dx.dim(2), theta, -1.0f, stream_);
}

// ---- attention -------------------------------------------------------------------------------------------

namespace {

// Shapes of q (N, Hq, D), k and v (N or slots, Hkv, D) and the cu tensor (S+1).
AttentionDims attention_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& cu, int64_t max_rows) {
  RLRUN_CHECK(q.rank() == 3 && k.rank() == 3, std::string(op) + ": q " + q.str() + " and k " + k.str() +
                                                  " must be (N, H, D)");
  AttentionDims d;
  d.n = q.dim(0);
  d.hq = static_cast<int>(q.dim(1));
  d.hkv = static_cast<int>(k.dim(1));
  d.d = static_cast<int>(q.dim(2));
  RLRUN_CHECK(d.hkv > 0 && d.hq % d.hkv == 0, std::string(op) + ": query heads " + std::to_string(d.hq) +
                                                  " not a multiple of kv heads " + std::to_string(d.hkv));
  RLRUN_CHECK(k.dim(2) == d.d && d.d > 0 && d.d <= kAttentionMaxHeadDim,
              std::string(op) + ": head dim " + std::to_string(d.d) + " (at most " +
                  std::to_string(kAttentionMaxHeadDim) + " on CUDA)");
  RLRUN_CHECK(cu.rank() == 1 && cu.dim(0) >= 1 && cu.dtype() == DType::kI32,
              std::string(op) + ": cu_seqlens is " + cu.str() + ", expected i32 (S+1)");
  RLRUN_CHECK(cu.dim(0) - 1 <= 65535 && d.hkv <= 65535, std::string(op) + ": more than 65535 sequences or kv heads");
  d.num_seqs = static_cast<int>(cu.dim(0) - 1);
  RLRUN_CHECK(max_rows >= 0, std::string(op) + ": negative max_seqlen");
  d.max_rows = max_rows;
  return d;
}

}  // namespace

void CudaBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen) {
  expect("attention_forward", "q", q, DType::kBF16);
  expect("attention_forward", "k", k, DType::kBF16);
  expect("attention_forward", "cu_seqlens", cu_seqlens, DType::kI32);
  const AttentionDims d = attention_dims("attention_forward", q, k, cu_seqlens, max_seqlen);
  expect("attention_forward", "k", k, Shape{d.n, d.hkv, d.d}, DType::kBF16);
  expect("attention_forward", "v", v, Shape{d.n, d.hkv, d.d}, DType::kBF16);
  expect("attention_forward", "out", out, q.shape(), DType::kBF16);
  if (lse.defined()) expect("attention_forward", "lse", lse, Shape{d.n, d.hq}, DType::kF32);
  make_current();
  cuda::attention_forward(bf(out), f32(lse), bf(q), bf(k), bf(v), i32(cu_seqlens), d, error_flags_, stream_);
}

void CudaBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                     const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen) {
  expect("attention_backward", "q", q, DType::kBF16);
  expect("attention_backward", "k", k, DType::kBF16);
  expect("attention_backward", "cu_seqlens", cu_seqlens, DType::kI32);
  const AttentionDims d = attention_dims("attention_backward", q, k, cu_seqlens, max_seqlen);
  const Shape kv{d.n, d.hkv, d.d};
  expect("attention_backward", "k", k, kv, DType::kBF16);
  expect("attention_backward", "v", v, kv, DType::kBF16);
  expect("attention_backward", "out", out, q.shape(), DType::kBF16);
  expect("attention_backward", "dout", dout, q.shape(), DType::kBF16);
  expect("attention_backward", "dq", dq, q.shape(), DType::kBF16);
  expect("attention_backward", "dk", dk, kv, DType::kBF16);
  expect("attention_backward", "dv", dv, kv, DType::kBF16);
  expect("attention_backward", "lse", lse, Shape{d.n, d.hq}, DType::kF32);
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

void CudaBackend::paged_attention_forward(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                          const Tensor& v_cache, const Tensor& cu_q, const Tensor& seq_start,
                                          const Tensor& block_tables, int64_t block_size, int64_t max_context) {
  const char* op = "paged_attention_forward";
  expect(op, "q", q, DType::kBF16);
  expect(op, "k_cache", k_cache, DType::kBF16);
  expect(op, "cu_q", cu_q, DType::kI32);
  // A sequence has at most min(N, max_context) new rows: the launch covers that many.
  const AttentionDims d = attention_dims(op, q, k_cache, cu_q, std::min(q.dim(0), max_context));
  expect(op, "v_cache", v_cache, k_cache.shape(), DType::kBF16);
  expect(op, "out", out, q.shape(), DType::kBF16);
  expect(op, "seq_start", seq_start, Shape{d.num_seqs}, DType::kI32);
  expect(op, "block_tables", block_tables, DType::kI32);
  RLRUN_CHECK(block_tables.rank() == 2 && block_tables.dim(0) == d.num_seqs,
              std::string(op) + ": block_tables is " + block_tables.str() + ", expected (S, max_blocks)");
  RLRUN_CHECK(block_size > 0, std::string(op) + ": block_size must be positive");
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

void CudaBackend::swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  expect("swiglu_forward", "gate", gate, DType::kBF16);
  expect("swiglu_forward", "up", up, gate.shape(), DType::kBF16);
  expect("swiglu_forward", "out", out, gate.shape(), DType::kBF16);
  make_current();
  cuda::swiglu_forward(bf(out), bf(gate), bf(up), gate.numel(), stream_);
}

void CudaBackend::swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                  const Tensor& up) {
  expect("swiglu_backward", "gate", gate, DType::kBF16);
  expect("swiglu_backward", "up", up, gate.shape(), DType::kBF16);
  expect("swiglu_backward", "dout", dout, gate.shape(), DType::kBF16);
  expect("swiglu_backward", "dgate", dgate, gate.shape(), DType::kBF16);
  expect("swiglu_backward", "dup", dup, gate.shape(), DType::kBF16);
  make_current();
  cuda::swiglu_backward(bf(dgate), bf(dup), bf(dout), bf(gate), bf(up), gate.numel(), stream_);
}

// ---- fused log-softmax + gather + entropy ------------------------------------------------------------------------

void CudaBackend::logprob_forward(const Tensor& logprob, const Tensor& entropy, const Tensor& lse,
                                  const Tensor& logits, const Tensor& targets) {
  expect("logprob_forward", "logits", logits, DType::kBF16);
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  expect("logprob_forward", "targets", targets, Shape{n}, DType::kI32);
  expect("logprob_forward", "logprob", logprob, Shape{n}, DType::kF32);
  expect("logprob_forward", "entropy", entropy, Shape{n}, DType::kF32);
  expect("logprob_forward", "lse", lse, Shape{n}, DType::kF32);
  make_current();
  cuda::logprob_forward(f32(logprob), f32(entropy), f32(lse), bf(logits), i32(targets), n, vocab, error_flags_,
                        stream_);
}

void CudaBackend::logprob_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                   const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                                   const Tensor& dentropy) {
  expect("logprob_backward", "logits", logits, DType::kBF16);
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  expect("logprob_backward", "dlogits", dlogits, logits.shape(), DType::kBF16);
  expect("logprob_backward", "targets", targets, Shape{n}, DType::kI32);
  expect("logprob_backward", "lse", lse, Shape{n}, DType::kF32);
  expect("logprob_backward", "entropy", entropy, Shape{n}, DType::kF32);
  expect("logprob_backward", "dlogprob", dlogprob, Shape{n}, DType::kF32);
  if (dentropy.defined()) expect("logprob_backward", "dentropy", dentropy, Shape{n}, DType::kF32);
  const char *dz = static_cast<const char*>(dlogits.data()), *z = static_cast<const char*>(logits.data());
  RLRUN_CHECK(dz == z || dz + dlogits.nbytes() <= z || z + logits.nbytes() <= dz,
              "logprob_backward: dlogits must be logits itself or not overlap it");
  make_current();
  cuda::logprob_backward(bf(dlogits), bf(logits), i32(targets), f32(lse), f32(entropy), f32(dlogprob), f32(dentropy),
                         n, vocab, stream_);
}

}  // namespace rlrun::engine::cuda
