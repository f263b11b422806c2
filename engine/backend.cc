// backend.cc - the op contracts of backend.h, checked once for every backend, and the factory.
#include "engine/backend.h"

#include <algorithm>
#include <cmath>
#include <charconv>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/cpu/cpu_backend.h"
#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/device.h"
#endif

namespace rlrun::engine {

namespace {

Tensor allocate(Backend& backend, Shape shape, DType dtype, bool zeroed) {
  // A zero-byte tensor still gets a distinct block so that data() is never null when defined.
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  void* block = zeroed ? backend.raw_alloc(bytes) : backend.raw_alloc_uninitialized(bytes);
  return Tensor(std::make_shared<Storage>(&backend, block, bytes), 0, shape, dtype);
}

}  // namespace

Tensor Backend::zeros(Shape shape, DType dtype) { return allocate(*this, shape, dtype, true); }
Tensor Backend::uninitialized(Shape shape, DType dtype) { return allocate(*this, shape, dtype, false); }

namespace {

// The checks of one call of one op: every failure aborts with "<op>: <what>", naming the tensor's
// role and its dtype and shape beside the expected ones.
class OpCheck {
 public:
  OpCheck(const Backend& backend, const char* op) : backend_(backend), op_(op) {}

  // Aborts with "<op>: <what>". Callers test first, so that a call that keeps the contract
  // builds no message.
  [[noreturn]] void fail(const std::string& what) const { RLRUN_CHECK(false, std::string(op_) + ": " + what); }

  // t is defined and on this backend (any dtype and shape).
  void on_backend(const char* role, const Tensor& t) const {
    if (!t.defined()) fail(std::string(role) + " is undefined");
    if (t.backend() != &backend_)
      fail(std::string(role) + " " + t.str() + " is on " + (t.backend() ? t.backend()->name() : "no backend") +
           ", not on this " + backend_.name() + " backend");
  }
  void dtype(const char* role, const Tensor& t, DType dtype) const {
    on_backend(role, t);
    if (t.dtype() != dtype) fail(std::string(role) + " is " + t.str() + ", expected " + dtype_name(dtype));
  }
  void tensor(const char* role, const Tensor& t, Shape shape, DType dtype) const {
    this->dtype(role, t, dtype);
    if (t.shape() != shape) fail(std::string(role) + " is " + t.str() + ", expected " + shape.str());
  }
  // The same for a tensor the op documents as optional: nothing to check when undefined.
  void optional(const char* role, const Tensor& t, Shape shape, DType dtype) const {
    if (t.defined()) tensor(role, t, shape, dtype);
  }
  // f32 or the compute dtype: what elementwise ops, matmul and sum_squares accept.
  void float_dtype(const char* role, const Tensor& t) const {
    on_backend(role, t);
    const DType compute = backend_.compute_dtype();
    if (t.dtype() != DType::kF32 && t.dtype() != compute)
      fail(std::string(role) + " is " + t.str() + ", expected " +
           (compute == DType::kF32 ? std::string("f32") : std::string(dtype_name(compute)) + " or f32"));
  }
  // out may be `in` itself (an op computed in place) but must not partly overlap it.
  void same_or_disjoint(const char* out_role, const Tensor& out, const char* in_role, const Tensor& in) const {
    const bool same = out.data() == in.data() && out.nbytes() == in.nbytes();
    if (!same && overlap(out, in)) fail(std::string(out_role) + " must be " + in_role + " itself or not overlap it");
  }
  void disjoint(const char* out_role, const Tensor& out, const char* in_role, const Tensor& in) const {
    if (overlap(out, in)) fail(std::string(out_role) + " must not overlap " + in_role);
  }

 private:
  // Both tensors are on this backend, so their addresses are in one address space.
  static bool overlap(const Tensor& a, const Tensor& b) {
    const char *pa = static_cast<const char*>(a.data()), *pb = static_cast<const char*>(b.data());
    return pa < pb + b.nbytes() && pb < pa + a.nbytes();
  }

  const Backend& backend_;
  const char* op_;
};

std::string matmul_str(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return "out " + out.str() + " = a" + (trans_a ? "^T " : " ") + a.str() + " @ b" + (trans_b ? "^T " : " ") + b.str();
}

}  // namespace

// ---- copies -------------------------------------------------------------------------------------

void Backend::copy_from_host(const Tensor& dst, const void* src, size_t bytes) {
  const OpCheck c(*this, "copy_from_host");
  c.on_backend("dst", dst);
  if (bytes != dst.nbytes()) c.fail(std::to_string(bytes) + " bytes into " + dst.str());
  copy_from_host_impl(dst, src, bytes);
}

void Backend::copy_to_host(void* dst, const Tensor& src, size_t bytes) {
  const OpCheck c(*this, "copy_to_host");
  c.on_backend("src", src);
  if (bytes != src.nbytes()) c.fail(std::to_string(bytes) + " bytes from " + src.str());
  copy_to_host_impl(dst, src, bytes);
}

void Backend::copy(const Tensor& dst, const Tensor& src) {
  const OpCheck c(*this, "copy");
  c.on_backend("src", src);
  c.on_backend("dst", dst);
  if (dst.dtype() != src.dtype() || dst.numel() != src.numel()) c.fail(src.str() + " -> " + dst.str());
  c.same_or_disjoint("dst", dst, "src", src);
  copy_impl(dst, src);
}

void Backend::fill_zero(const Tensor& t) {
  OpCheck(*this, "fill_zero").on_backend("t", t);
  fill_zero_impl(t);
}

void Backend::convert(const Tensor& dst, const Tensor& src) {
  const OpCheck c(*this, "convert");
  c.on_backend("src", src);
  c.on_backend("dst", dst);
  if (dst.numel() != src.numel()) c.fail(src.str() + " -> " + dst.str());
  if (dst.dtype() == src.dtype()) return copy(dst, src);
  const bool f32_bf16 = src.dtype() == DType::kF32 || src.dtype() == DType::kBF16;
  const bool bf16_f32 = dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16;
  if (!f32_bf16 || !bf16_f32) c.fail("unsupported " + src.str() + " -> " + dst.str() + " (f32 <-> bf16 only)");
  c.disjoint("dst", dst, "src", src);
  convert_impl(dst, src);
}

// ---- dense algebra ------------------------------------------------------------------------------

void Backend::matmul(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                     float beta) {
  const OpCheck c(*this, "matmul");
  c.float_dtype("a", a);
  // bf16 weights times f32 activations: a backend computing in f32 over ModelWeights' bf16 matrices.
  const bool bf16_weights = b.dtype() == DType::kBF16 && a.dtype() == DType::kF32 && compute_dtype() == DType::kF32;
  if (!bf16_weights) c.dtype("b", b, a.dtype());
  c.float_dtype("out", out);
  if (out.dtype() != a.dtype() && out.dtype() != DType::kF32)
    c.fail("out " + out.str() + " must be f32 or a's dtype " + dtype_name(a.dtype()));
  const int64_t m = trans_a ? a.shape().cols() : a.shape().rows();
  const int64_t k = trans_a ? a.shape().rows() : a.shape().cols();
  const int64_t kb = trans_b ? b.shape().cols() : b.shape().rows();
  const int64_t n = trans_b ? b.shape().rows() : b.shape().cols();
  if (k != kb || out.shape().rows() != m || out.shape().cols() != n)
    c.fail(matmul_str(out, a, b, trans_a, trans_b) + " does not fit");
  c.disjoint("out", out, "a", a);
  c.disjoint("out", out, "b", b);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum (BLAS libraries differ on whether they still scale by beta)
    if (beta == 0.0f) fill_zero(out); else scale(out, beta);
    return;
  }
  matmul_impl(out, a, b, trans_a, trans_b, alpha, beta);
}

void Backend::add_bias(const Tensor& out, const Tensor& bias) {
  const OpCheck c(*this, "add_bias");
  c.dtype("out", out, compute_dtype());
  c.tensor("bias", bias, Shape{out.shape().cols()}, compute_dtype());
  add_bias_impl(out, bias);
}

void Backend::add_bias_backward(const Tensor& dbias, const Tensor& dout) {
  const OpCheck c(*this, "add_bias_backward");
  c.dtype("dout", dout, compute_dtype());
  c.tensor("dbias", dbias, Shape{dout.shape().cols()}, DType::kF32);
  add_bias_backward_impl(dbias, dout);
}

// ---- elementwise --------------------------------------------------------------------------------

void Backend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  const OpCheck c(*this, "add");
  c.float_dtype("out", out);
  c.tensor("a", a, out.shape(), out.dtype());
  c.tensor("b", b, out.shape(), out.dtype());
  c.same_or_disjoint("out", out, "a", a);
  c.same_or_disjoint("out", out, "b", b);
  add_impl(out, a, b);
}

void Backend::axpy(const Tensor& y, float alpha, const Tensor& x) {
  const OpCheck c(*this, "axpy");
  c.float_dtype("y", y);
  c.dtype("x", x, y.dtype());
  if (x.numel() != y.numel()) c.fail("y " + y.str() + " and x " + x.str() + " differ in size");
  axpy_impl(y, alpha, x);
}

void Backend::scale(const Tensor& x, float alpha) {
  OpCheck(*this, "scale").float_dtype("x", x);
  scale_impl(x, alpha);
}

// ---- embedding ----------------------------------------------------------------------------------

void Backend::embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const OpCheck c(*this, "embedding_forward");
  if (table.dtype() != DType::kBF16 || compute_dtype() != DType::kF32) c.dtype("table", table, compute_dtype());
  const int64_t h = table.shape().cols(), n = ids.numel();
  c.tensor("ids", ids, Shape{n}, DType::kI32);
  c.tensor("out", out, Shape{n, h}, compute_dtype());
  embedding_forward_impl(out, table, ids);
}

void Backend::embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const OpCheck c(*this, "embedding_backward");
  c.dtype("dtable", dtable, DType::kF32);
  const int64_t h = dtable.shape().cols(), n = ids.numel();
  c.tensor("ids", ids, Shape{n}, DType::kI32);
  c.tensor("dout", dout, Shape{n, h}, compute_dtype());
  embedding_backward_impl(dtable, dout, ids);
}

// ---- RMSNorm ------------------------------------------------------------------------------------

void Backend::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                              float eps, float offset) {
  const OpCheck c(*this, "rmsnorm_forward");
  c.dtype("x", x, compute_dtype());
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  c.tensor("out", out, x.shape(), compute_dtype());
  c.tensor("weight", weight, Shape{h}, compute_dtype());
  c.optional("rstd", rstd, Shape{n}, DType::kF32);
  rmsnorm_forward_impl(out, rstd, x, weight, eps, offset);
}

void Backend::rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                               const Tensor& weight, const Tensor& rstd, float offset) {
  const OpCheck c(*this, "rmsnorm_backward");
  c.dtype("x", x, compute_dtype());
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  c.tensor("dx", dx, x.shape(), compute_dtype());
  c.tensor("dout", dout, x.shape(), compute_dtype());
  c.tensor("weight", weight, Shape{h}, compute_dtype());
  c.tensor("dweight", dweight, Shape{h}, DType::kF32);
  c.tensor("rstd", rstd, Shape{n}, DType::kF32);
  rmsnorm_backward_impl(dx, dweight, dout, x, weight, rstd, offset);
}

// ---- rotary embedding ---------------------------------------------------------------------------

namespace {

void check_rope(const OpCheck& c, DType compute, const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  c.dtype("x", x, compute);
  if (x.rank() != 3 || x.dim(2) % 2 != 0) c.fail("x must be (N, H, D) with even D, got " + x.str());
  c.tensor("positions", positions, Shape{x.dim(0)}, DType::kI32);
  c.tensor("inv_freq", inv_freq, Shape{x.dim(2) / 2}, DType::kF32);
}

// 1 / theta^(2i/D) in f32, as HF computes it.
Tensor default_inv_freq(Backend& b, float theta, int64_t d) {
  std::vector<float> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) f[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(d));
  return from_host(b, Shape{d / 2}, f);
}

}  // namespace

void Backend::rope_forward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, float scale) {
  check_rope(OpCheck(*this, "rope_forward"), compute_dtype(), x, positions, inv_freq);
  rope_forward_impl(x, positions, inv_freq, scale);
}

void Backend::rope_backward(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq, float scale) {
  check_rope(OpCheck(*this, "rope_backward"), compute_dtype(), dx, positions, inv_freq);
  rope_backward_impl(dx, positions, inv_freq, scale);
}

void Backend::rope_forward(const Tensor& x, const Tensor& positions, float theta) {
  if (x.rank() != 3) check_rope(OpCheck(*this, "rope_forward"), compute_dtype(), x, positions, Tensor());
  rope_forward(x, positions, default_inv_freq(*this, theta, x.dim(2)));
}

void Backend::rope_backward(const Tensor& dx, const Tensor& positions, float theta) {
  if (dx.rank() != 3) check_rope(OpCheck(*this, "rope_backward"), compute_dtype(), dx, positions, Tensor());
  rope_backward(dx, positions, default_inv_freq(*this, theta, dx.dim(2)));
}

// ---- attention ----------------------------------------------------------------------------------

namespace {

// q (N, Hq, D) and k (rows, Hkv, D) in the compute dtype with Hq % Hkv == 0, and cu (S+1, i32).
void check_heads(const OpCheck& c, DType compute, const Tensor& q, const char* k_role, const Tensor& k,
                  const char* cu_role, const Tensor& cu) {
  c.dtype("q", q, compute);
  c.dtype(k_role, k, compute);
  if (q.rank() != 3 || k.rank() != 3)
    c.fail("q " + q.str() + " and " + k_role + " " + k.str() + " must be (rows, H, D)");
  if (k.dim(1) == 0 || q.dim(1) % k.dim(1) != 0 || k.dim(2) != q.dim(2))
    c.fail("q " + q.str() + " does not fit " + k_role + " " + k.str() + " (query heads a multiple of kv heads, one D)");
  c.dtype(cu_role, cu, DType::kI32);
  if (cu.rank() != 1 || cu.dim(0) < 1) c.fail(std::string(cu_role) + " is " + cu.str() + ", expected (S+1)");
}

}  // namespace

void Backend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window,
                                const Tensor& q_begin) {
  const OpCheck c(*this, "attention_forward");
  if (window < 0) c.fail("negative window " + std::to_string(window));
  check_heads(c, compute_dtype(), q, "k", k, "cu_seqlens", cu_seqlens);
  const int64_t n = q.dim(0), hq = q.dim(1);
  c.tensor("k", k, Shape{n, k.dim(1), q.dim(2)}, compute_dtype());
  c.tensor("v", v, k.shape(), compute_dtype());
  c.tensor("out", out, q.shape(), compute_dtype());
  c.optional("lse", lse, Shape{n, hq}, DType::kF32);
  if (max_seqlen < 0) c.fail("negative max_seqlen " + std::to_string(max_seqlen));
  c.optional("q_begin", q_begin, Shape{cu_seqlens.dim(0) - 1}, DType::kI32);
  attention_forward_impl(out, lse, q, k, v, cu_seqlens, max_seqlen, window, q_begin);
}

void Backend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                 const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window,
                                 const Tensor& q_begin) {
  const OpCheck c(*this, "attention_backward");
  if (window < 0) c.fail("negative window " + std::to_string(window));
  check_heads(c, compute_dtype(), q, "k", k, "cu_seqlens", cu_seqlens);
  const int64_t n = q.dim(0), hq = q.dim(1);
  const Shape kv{n, k.dim(1), q.dim(2)};
  c.tensor("k", k, kv, compute_dtype());
  c.tensor("v", v, kv, compute_dtype());
  c.tensor("out", out, q.shape(), compute_dtype());
  c.tensor("dout", dout, q.shape(), compute_dtype());
  c.tensor("dq", dq, q.shape(), compute_dtype());
  c.tensor("dk", dk, kv, compute_dtype());
  c.tensor("dv", dv, kv, compute_dtype());
  c.tensor("lse", lse, Shape{n, hq}, DType::kF32);
  if (max_seqlen < 0) c.fail("negative max_seqlen " + std::to_string(max_seqlen));
  c.optional("q_begin", q_begin, Shape{cu_seqlens.dim(0) - 1}, DType::kI32);
  attention_backward_impl(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, max_seqlen, window, q_begin);
}

void Backend::paged_attention_forward(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                      const Tensor& v_cache, const Tensor& cu_q, const Tensor& seq_start,
                                      const Tensor& block_tables, int64_t block_size, int64_t max_context,
                                      int64_t window) {
  const OpCheck c(*this, "paged_attention_forward");
  if (window < 0) c.fail("negative window " + std::to_string(window));
  check_heads(c, compute_dtype(), q, "k_cache", k_cache, "cu_q", cu_q);
  const int64_t num_seqs = cu_q.dim(0) - 1;
  c.tensor("v_cache", v_cache, k_cache.shape(), compute_dtype());
  c.tensor("out", out, q.shape(), compute_dtype());
  c.tensor("seq_start", seq_start, Shape{num_seqs}, DType::kI32);
  c.dtype("block_tables", block_tables, DType::kI32);
  if (block_tables.rank() != 2 || block_tables.dim(0) != num_seqs)
    c.fail("block_tables is " + block_tables.str() + ", expected (" + std::to_string(num_seqs) + ", max_blocks)");
  if (block_size <= 0) c.fail("block_size must be positive, got " + std::to_string(block_size));
  if (max_context < 0) c.fail("negative max_context " + std::to_string(max_context));
  paged_attention_forward_impl(out, q, k_cache, v_cache, cu_q, seq_start, block_tables, block_size, max_context,
                               window);
}

// ---- SwiGLU -------------------------------------------------------------------------------------

namespace {

void check_gated_forward(const OpCheck& c, DType compute, const Tensor& out, const Tensor& gate, const Tensor& up) {
  c.dtype("gate", gate, compute);
  c.tensor("up", up, gate.shape(), compute);
  c.tensor("out", out, gate.shape(), compute);
}

void check_gated_backward(const OpCheck& c, DType compute, const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                          const Tensor& gate, const Tensor& up) {
  c.dtype("gate", gate, compute);
  c.tensor("up", up, gate.shape(), compute);
  c.tensor("dout", dout, gate.shape(), compute);
  c.tensor("dgate", dgate, gate.shape(), compute);
  c.tensor("dup", dup, gate.shape(), compute);
  c.same_or_disjoint("dgate", dgate, "gate", gate);
  c.same_or_disjoint("dup", dup, "up", up);
  c.disjoint("dgate", dgate, "dup", dup);
  c.disjoint("dgate", dgate, "up", up);
  c.disjoint("dup", dup, "gate", gate);
}

}  // namespace

void Backend::geglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  check_gated_forward(OpCheck(*this, "geglu_forward"), compute_dtype(), out, gate, up);
  geglu_forward_impl(out, gate, up);
}

void Backend::geglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                             const Tensor& up) {
  check_gated_backward(OpCheck(*this, "geglu_backward"), compute_dtype(), dgate, dup, dout, gate, up);
  geglu_backward_impl(dgate, dup, dout, gate, up);
}

void Backend::swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const OpCheck c(*this, "swiglu_forward");
  c.dtype("gate", gate, compute_dtype());
  c.tensor("up", up, gate.shape(), compute_dtype());
  c.tensor("out", out, gate.shape(), compute_dtype());
  swiglu_forward_impl(out, gate, up);
}

void Backend::swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                              const Tensor& up) {
  const OpCheck c(*this, "swiglu_backward");
  c.dtype("gate", gate, compute_dtype());
  c.tensor("up", up, gate.shape(), compute_dtype());
  c.tensor("dout", dout, gate.shape(), compute_dtype());
  c.tensor("dgate", dgate, gate.shape(), compute_dtype());
  c.tensor("dup", dup, gate.shape(), compute_dtype());
  c.same_or_disjoint("dgate", dgate, "gate", gate);
  c.same_or_disjoint("dup", dup, "up", up);
  c.disjoint("dgate", dgate, "dup", dup);
  c.disjoint("dgate", dgate, "up", up);
  c.disjoint("dup", dup, "gate", gate);
  swiglu_backward_impl(dgate, dup, dout, gate, up);
}

// ---- fused log-softmax + gather + entropy -------------------------------------------------------

void Backend::logprob_forward(const Tensor& logprob, const Tensor& entropy, const Tensor& lse, const Tensor& logits,
                              const Tensor& targets) {
  const OpCheck c(*this, "logprob_forward");
  c.dtype("logits", logits, compute_dtype());
  const Shape rows{logits.shape().rows()};
  c.tensor("targets", targets, rows, DType::kI32);
  c.tensor("logprob", logprob, rows, DType::kF32);
  c.tensor("entropy", entropy, rows, DType::kF32);
  c.tensor("lse", lse, rows, DType::kF32);
  logprob_forward_impl(logprob, entropy, lse, logits, targets);
}

void Backend::logprob_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                               const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                               const Tensor& dentropy) {
  const OpCheck c(*this, "logprob_backward");
  c.dtype("logits", logits, compute_dtype());
  const Shape rows{logits.shape().rows()};
  c.tensor("dlogits", dlogits, logits.shape(), compute_dtype());
  c.tensor("targets", targets, rows, DType::kI32);
  c.tensor("lse", lse, rows, DType::kF32);
  c.tensor("entropy", entropy, rows, DType::kF32);
  c.tensor("dlogprob", dlogprob, rows, DType::kF32);
  c.optional("dentropy", dentropy, rows, DType::kF32);
  c.same_or_disjoint("dlogits", dlogits, "logits", logits);
  logprob_backward_impl(dlogits, logits, targets, lse, entropy, dlogprob, dentropy);
}

// ---- optimizer ----------------------------------------------------------------------------------

void Backend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                         const AdamWParams& p) {
  const OpCheck c(*this, "adamw_step");
  c.dtype("param", param, DType::kF32);
  c.tensor("grad", grad, param.shape(), DType::kF32);
  c.tensor("m", m, param.shape(), DType::kF32);
  c.tensor("v", v, param.shape(), DType::kF32);
  if (p.step < 1) c.fail("step must be >= 1, got " + std::to_string(p.step));
  adamw_step_impl(param, grad, m, v, p);
}

double Backend::sum_squares(const Tensor& x) {
  OpCheck(*this, "sum_squares").float_dtype("x", x);
  return sum_squares_impl(x);
}

std::vector<std::string> available_backends() {
#ifdef RLRUN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Result<std::unique_ptr<Backend>> create_backend(std::string_view name, int num_threads) {
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(num_threads));
#ifdef RLRUN_HAVE_CUDA
  // "cuda" is device 0, "cuda:N" device N (a process normally sees one device: CUDA_VISIBLE_DEVICES).
  if (name == "cuda" || name.starts_with("cuda:")) {
    int device = 0;
    if (name != "cuda") {
      const std::string_view digits = name.substr(5);
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device);
      if (ec != std::errc() || end != digits.data() + digits.size() || device < 0) {
        return invalid_argument(str("compute backend `", name, "`: expected cuda or cuda:N with N a device number"));
      }
    }
    return cuda::create_cuda_backend(device);
  }
  return invalid_argument(str("unknown compute backend `", name, "` (this build has: cpu, cuda)"));
#else
  return invalid_argument(str("unknown compute backend `", name, "` (this build has: cpu; cuda needs nvcc at build time)"));
#endif
}

}  // namespace rlrun::engine
