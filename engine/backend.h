// backend.h - the compute interface every device implements (engine/cpu/, engine/cuda/).
//
// A Backend owns memory (zeros/free), moves bytes (host <-> backend, backend <-> backend) and runs
// the ops a Llama-family decoder needs for training and inference, each forward with its backward.
// The model is written once against this class. One op suite (tests/engine/ops_*_test.cc) runs on
// every backend against double-precision references, every backward op against finite
// differences; engine/cpu/ is the reference the CUDA backend's remaining cases are compared with.
//
// Layout: activations are FLAT and token-major. A packed micro-batch of several sequences is N
// tokens in a row; sequence boundaries come from `cu_seqlens` (int32, (S+1): cu[0] = 0,
// cu[s+1] - cu[s] = length of sequence s >= 1, cu[S] = N), exactly like flash-attn's varlen API.
// Per-head activations are (N, H, D) = the (N, H*D) output of a projection viewed per head.
//
// Dtypes: `compute_dtype()` is the dtype of weights-for-compute and activations (f32 on CPU;
// bf16 on CUDA, accumulating in fp32). Statistics saved for backward (rstd, lse), log-probs,
// entropies, master weights, gradients of weights and optimizer state are always f32; ids,
// positions and cu_seqlens always i32. Unless stated, "f32" below means compute_dtype().
//
// Conventions for every op:
// - All tensors are on this backend, contiguous, with exactly the documented shapes and dtypes.
//   Each public op below is a non-virtual method that checks this contract ONCE, here in
//   backend.cc, for every backend, and then calls the backend's private `<op>_impl`; a mismatch
//   is a bug in the caller and aborts naming the op, the tensor's role and the shapes. Checks that
//   must read the data (an id outside the vocabulary, cu_seqlens out of order, a block table
//   entry outside the cache) are made by the backend that can read it: the CPU at once, CUDA at
//   the next synchronisation point (cuda/cuda_backend.h). A backend may add limits of its own
//   (a CUDA kernel's largest head dim), which abort the same way.
// - Outputs are preallocated by the caller. Activation outputs and activation gradients
//   (out, dx, dq, ...) are OVERWRITTEN. Parameter gradients (dweight, dtable, dbias) are
//   ACCUMULATED (+=), so micro-batches sum into one gradient buffer; zero them per step.
// - Outputs must not alias inputs unless the op says so (where an op allows aliasing, the
//   output must be that input itself or not overlap it: checked).
// - Ops are asynchronous with respect to the host on device backends; synchronize() waits, and
//   copy_to_host / sum_squares synchronize themselves.
//
// Threads: one host thread drives a Backend at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/tensor.h"

namespace rlrun::engine {

struct AdamWParams {
  float lr = 1e-6f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: param -= lr * weight_decay * param
  int64_t step = 1;           // 1-based step count, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;   // "cpu", "cuda:0"
  virtual bool is_host() const = 0;       // memory directly addressable by the CPU
  virtual DType compute_dtype() const = 0;
  // Compute threads of a host backend (0 for a device), and changing them between steps
  // (balance_cpu_threads): false where the backend has no such setting or `n` is out of its range.
  virtual int compute_threads() const { return 0; }
  virtual bool set_compute_threads(int n) { (void)n; return false; }
  // Products of bf16 roundings of their operands with fp32 sums (compute_dtype: bf16) on a backend
  // whose compute dtype is f32: false where the backend cannot (the CPU backend on a CPU without
  // native bf16 products) or has no such setting.
  virtual bool set_matmul_bf16(bool on) { return !on; }
  // What the matmuls did since the backend was made: FLOPs (2 m n k each) and the wall seconds
  // spent in them (a host backend; zeros elsewhere). Their ratio over a step is the speed the
  // products actually ran at, beside what the host can do (backend_info.h: HostCompute).
  struct MatmulStats {
    double flops = 0;
    double seconds = 0;
    int64_t calls = 0;
  };
  virtual MatmulStats matmul_stats() const { return {}; }

  // ---- memory ---------------------------------------------------------------------------------
  // A new zero-filled tensor. Aborts when out of memory (a device failure, not a user error).
  Tensor zeros(Shape shape, DType dtype);
  // A new tensor whose contents are unspecified: only for a buffer that ops overwrite whole before
  // anything reads it (a matmul's output with beta = 0, a norm's output), to skip zeros()'s fill.
  Tensor uninitialized(Shape shape, DType dtype);
  // Raw allocation of `bytes` zeroed bytes (256-byte aligned) and its release; used by zeros()
  // and Storage. Prefer zeros().
  virtual void* raw_alloc(size_t bytes) = 0;
  // raw_alloc without the zeroing; a backend where the fill costs nothing need not override it.
  virtual void* raw_alloc_uninitialized(size_t bytes) { return raw_alloc(bytes); }
  virtual void raw_free(void* ptr) = 0;
  // Bytes currently allocated through this backend and the peak since construction.
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;

  // ---- copies -----------------------------------------------------------------------------------
  // Any dtype; `bytes` must be the tensor's size.
  void copy_from_host(const Tensor& dst, const void* src, size_t bytes);  // bytes == dst.nbytes()
  void copy_to_host(void* dst, const Tensor& src, size_t bytes);         // bytes == src.nbytes()
  // dst = src: same dtype and numel; dst is src itself or does not overlap it. Across backends:
  // copy_across (tensor.h).
  void copy(const Tensor& dst, const Tensor& src);
  void fill_zero(const Tensor& t);
  // dst = src converted between f32 and bf16 (round to nearest even), or a plain copy() when the
  // dtypes match. Same numel.
  void convert(const Tensor& dst, const Tensor& src);
  virtual void synchronize() = 0;

  // ---- dense algebra ----------------------------------------------------------------------------
  // out = alpha * op(a) @ op(b) + beta * out, row-major; op(x) = x^T when the flag is set.
  // Each tensor is read as a matrix (Shape::rows(), Shape::cols()):
  //   a: (M, K), or (K, M) with trans_a;  b: (K, N), or (N, K) with trans_b;  out: (M, N).
  // Linear layer with HF weight W (out_features, in_features), x (T, in), y (T, out):
  //   forward   matmul(y, x, W, false, true)                    y  = x W^T
  //   dx        matmul(dx, dy, W, false, false)                 dx = dy W
  //   dW        matmul(dW, dy, x, true, false, 1, 1)            dW += dy^T x
  // beta == 0 ignores out's previous contents (NaNs included). M, N or K may be 0 (K == 0:
  // out = beta * out). Dtypes: a and b alike, compute_dtype() or f32; out a's dtype or f32 (f32
  // weight gradients from compute-dtype activations). On a backend whose compute dtype is f32, b
  // may also be bf16 with a and out f32: bf16-frozen weights (model/weights.h), multiplied as bf16
  // x bf16 with fp32 sums (a rounded to bf16), in every layout.
  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
              float alpha = 1.0f, float beta = 0.0f);

  // out (T, C) += bias (C) on every row (qwen2's q/k/v biases).
  void add_bias(const Tensor& out, const Tensor& bias);
  // dbias (C, f32) += column sums of dout (T, C).
  void add_bias_backward(const Tensor& dbias, const Tensor& dout);

  // ---- elementwise (same numel everywhere; one dtype per call, f32 or compute_dtype()) ------------
  void add(const Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b, one shape; out may be a or b
  void axpy(const Tensor& y, float alpha, const Tensor& x);       // y += alpha * x (residuals: alpha 1)
  void scale(const Tensor& x, float alpha);                       // x *= alpha, in place

  // ---- embedding ----------------------------------------------------------------------------------
  // out (N, H) = table (V, H) rows at ids (N, i32); table may be bf16 (widened) with an f32 out
  // on a backend whose compute dtype is f32. Every id must be in [0, V) (aborts otherwise:
  // ids are validated where they enter the process).
  void embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids);
  // dtable (V, H, f32) += scatter of dout (N, H) rows to ids (repeated ids sum).
  void embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids);

  // ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * (offset + weight) ------------------------------------
  // x, out (N, H); weight (H); rstd (N, f32) saved = 1 / sqrt(mean(x^2) + eps). offset: 0, or 1
  // for Gemma's (1 + w) norms. rstd may be undefined (inference: nothing saved).
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                       float eps, float offset = 0.0f);
  // dx (N, H) = d/dx; dweight (H, f32) += sum over rows of dout * x * rstd (the same for any offset).
  void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                        const Tensor& weight, const Tensor& rstd, float offset = 0.0f);

  // ---- rotary position embedding (HF Llama "rotate_half": pairs (i, i + D/2), not interleaved) ----
  // x (N, H, D) rotated IN PLACE and scaled: for i < D/2, angle = positions[n] * inv_freq[i],
  //   x1' = s (x1 cos - x2 sin),  x2' = s (x2 cos + x1 sin)   with x1 = x[..., i], x2 = x[..., i + D/2]
  // and s = `scale` (YaRN's attention factor; 1 otherwise). inv_freq (D/2, f32) holds the RoPE
  // variant (model/rope.h computes it as HF does); positions (N, i32) restart at 0 for each packed
  // sequence. D must be even. Angles in fp32 like HF: angle = f32(position) * inv_freq in f32.
  void rope_forward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, float scale = 1.0f);
  // dx (N, H, D) IN PLACE: the transpose, s times the rotation by -angle.
  void rope_backward(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq, float scale = 1.0f);
  // Plain RoPE of base `theta` (inv_freq[i] = 1 / theta^(2i/D) in f32, uploaded per call: tests).
  void rope_forward(const Tensor& x, const Tensor& positions, float theta);
  void rope_backward(const Tensor& dx, const Tensor& positions, float theta);

  // ---- grouped-query causal attention over packed sequences --------------------------------------
  // q, out (N, Hq, D); k, v (N, Hkv, D), Hq % Hkv == 0 (query head h reads kv head h / (Hq/Hkv));
  // cu_seqlens (S+1, i32) as above; max_seqlen = the longest sequence (a host-side hint for device
  // launch sizes; must be >= every length). Token t of sequence s attends to tokens cu[s]..t only,
  // with scale 1/sqrt(D). lse (N, Hq, f32) saved = log sum_j exp(scale q.k_j) per query row.
  // lse may be undefined (inference).
  // window > 0: sliding-window attention, token t sees only tokens t - window + 1 .. t of its
  // sequence (itself included; Gemma's local layers); 0: all of them.
  // q_begin (optional, (S) i32, 0 <= q_begin[s] <= its length): sequence s's first q_begin[s] rows
  // are keys and values only: their outputs are never read and their output gradient (dout) is
  // zero (a copy of a shared prefix before a continuation, model/layer.h PackedAttention). A
  // backend may skip them as queries (out, lse rows left unwritten; dq rows zero) or compute them
  // (dq rows zero all the same): both are exact.
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window = 0,
                         const Tensor& q_begin = Tensor());
  // dq (N, Hq, D), dk, dv (N, Hkv, D) overwritten, from dout (N, Hq, D) and the forward's q, k, v,
  // out and lse.
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window = 0,
                          const Tensor& q_begin = Tensor());

  // ---- attention of new tokens over a paged KV cache (prefill and decode) ------------------------
  // The new tokens of S sequences are packed in q, out (N, Hq, D): rows cu_q[s] .. cu_q[s+1] of
  // sequence s (cu_q (S+1, i32), cu_q[0] = 0, cu_q[S] = N) sit at positions seq_start[s],
  // seq_start[s] + 1, ... (seq_start (S, i32)); their K/V are already written to the cache.
  // k_cache, v_cache (slots, Hkv, D): position p of sequence s lives in slot
  //   block_tables[s, p / block_size] * block_size + p % block_size,  block_tables (S, max_blocks, i32).
  // A query at position p attends to positions 0..p of its own sequence (p - window + 1 .. p with
  // window > 0: positions before that are never read, so their blocks may be gone), scale 1/sqrt(D).
  // max_context: host-side hint >= every seq_start[s] + rows of s (device launch sizes, scratch).
  void paged_attention_forward(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                               const Tensor& v_cache, const Tensor& cu_q, const Tensor& seq_start,
                               const Tensor& block_tables, int64_t block_size, int64_t max_context,
                               int64_t window = 0);

  // ---- SwiGLU: out = silu(gate) * up, silu(g) = g * sigmoid(g) -----------------------------------
  // gate, up, out (N, I).
  void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
  // dgate, dup (N, I) from dout (N, I). dgate may alias gate and dup may alias up (in place).
  void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                       const Tensor& up);

  // ---- GeGLU (Gemma): out = gelu(gate) * up, HF's gelu_pytorch_tanh ------------------------------
  // gelu(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). Shapes and aliasing as SwiGLU.
  void geglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
  void geglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                      const Tensor& up);

  // ---- fused log-softmax + gather + entropy over the vocabulary -------------------------------------
  // logits (N, V); targets (N, i32): a target < 0 means "no target" (logprob 0, no gradient).
  // Writes, all (N, f32): logprob[n] = log softmax(logits[n])[targets[n]],
  // entropy[n] = -sum_v p log p, lse[n] = logsumexp(logits[n]) (saved for backward).
  // Never materialises more than one row of probabilities per thread.
  void logprob_forward(const Tensor& logprob, const Tensor& entropy, const Tensor& lse,
                       const Tensor& logits, const Tensor& targets);
  // dlogits (N, V) = dlogprob[n] * (onehot(target) - p) + dentropy[n] * (-p * (log p + entropy[n])),
  // with dlogprob, dentropy (N, f32); dentropy may be undefined (zero). dlogits MAY BE THE SAME
  // TENSOR as logits (computed in place, saving an (N, V) buffer); any other overlap is not allowed.
  void logprob_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                        const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                        const Tensor& dentropy);

  // ---- optimizer ------------------------------------------------------------------------------------
  // One AdamW step on f32 tensors of one shape (param, grad, m, v; m and v start at zero), step >= 1:
  //   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m / (1-b1^t);  vhat = v / (1-b2^t)
  //   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWParams& p);
  // sum of x^2 over all elements (f32 or compute_dtype()), accumulated in double, returned to the
  // host (synchronizes).
  // Global grad norm = sqrt(sum over grads); clip with scale(grad, max_norm / norm).
  double sum_squares(const Tensor& x);

 private:
  // ---- what each backend implements ----------------------------------------------------------------
  // The public op of the same name has checked every tensor against its contract above (dtype,
  // shape, backend, aliasing) before calling these, so an implementation only computes, plus any
  // check that needs the data or is a limit of its own. matmul_impl sees M, N, K >= 1 (the public
  // matmul handles empty products); convert_impl sees f32 -> bf16 or bf16 -> f32 only.
  virtual void copy_from_host_impl(const Tensor& dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host_impl(void* dst, const Tensor& src, size_t bytes) = 0;
  virtual void copy_impl(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill_zero_impl(const Tensor& t) = 0;
  virtual void convert_impl(const Tensor& dst, const Tensor& src) = 0;
  virtual void matmul_impl(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                           float alpha, float beta) = 0;
  virtual void add_bias_impl(const Tensor& out, const Tensor& bias) = 0;
  virtual void add_bias_backward_impl(const Tensor& dbias, const Tensor& dout) = 0;
  virtual void add_impl(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void axpy_impl(const Tensor& y, float alpha, const Tensor& x) = 0;
  virtual void scale_impl(const Tensor& x, float alpha) = 0;
  virtual void embedding_forward_impl(const Tensor& out, const Tensor& table, const Tensor& ids) = 0;
  virtual void embedding_backward_impl(const Tensor& dtable, const Tensor& dout, const Tensor& ids) = 0;
  virtual void rmsnorm_forward_impl(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                                    float eps, float offset) = 0;
  virtual void rmsnorm_backward_impl(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                                     const Tensor& weight, const Tensor& rstd, float offset) = 0;
  virtual void rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, float scale) = 0;
  virtual void rope_backward_impl(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq, float scale) = 0;
  virtual void attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window,
                                      const Tensor& q_begin) = 0;
  virtual void attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                       const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                       const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                                       int64_t window, const Tensor& q_begin) = 0;
  virtual void paged_attention_forward_impl(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                            const Tensor& v_cache, const Tensor& cu_q, const Tensor& seq_start,
                                            const Tensor& block_tables, int64_t block_size,
                                            int64_t max_context, int64_t window) = 0;
  virtual void swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual void geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual void geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                   const Tensor& up) = 0;
  virtual void swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                    const Tensor& up) = 0;
  virtual void logprob_forward_impl(const Tensor& logprob, const Tensor& entropy, const Tensor& lse,
                                    const Tensor& logits, const Tensor& targets) = 0;
  virtual void logprob_backward_impl(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                     const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                                     const Tensor& dentropy) = 0;
  virtual void adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                               const AdamWParams& p) = 0;
  virtual double sum_squares_impl(const Tensor& x) = 0;
};

// Names accepted by create_backend in this build: "cpu" always, "cuda" when built.
std::vector<std::string> available_backends();
// num_threads: host threads for CPU compute (0 = all hardware threads). Fails with a message
// when the name is unknown or the device is absent.
Result<std::unique_ptr<Backend>> create_backend(std::string_view name, int num_threads = 0);

}  // namespace rlrun::engine
