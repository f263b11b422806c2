// kernels.h - the launchers of every CUDA kernel, one group per .cu file (one file per idea).
//
// Launchers take raw device pointers, sizes and the stream; shapes are written beside each one.
// They check the launch (file:line) but not the arguments: CudaBackend checks shapes and dtypes
// before calling. All launches are asynchronous on `stream`.
//
// Device-side input errors (an id outside the vocabulary, a KV slot outside the cache) cannot
// abort a kernel cleanly, so kernels OR a bit into `err` (a device int the backend owns), skip the
// bad element, and the backend aborts with the op's name at its next synchronisation point.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rlrun::engine::cuda {

using bf16 = __nv_bfloat16;

enum DeviceError : int {
  kErrEmbeddingId = 1 << 0,   // embedding_forward/backward: id outside [0, V)
  kErrLogprobTarget = 1 << 1, // logprob_forward: target >= V
  kErrPagedSlot = 1 << 2,     // paged_attention_forward: block table points outside the cache
  kErrCuSeqlens = 1 << 3,     // attention: cu_seqlens not 0 = cu[0] <= ... <= cu[S] = N, or a row count > max_rows
};

// ---- elementwise.cu (T = float or bf16; n elements) -------------------------------------------
void convert_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream);  // round to nearest even
void convert_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream);
template <class T> void add(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);  // out may alias a, b
template <class T> void axpy(T* y, float alpha, const T* x, int64_t n, cudaStream_t stream);
template <class T> void scale(T* x, float alpha, int64_t n, cudaStream_t stream);
// out (rows, cols) += bias (cols);  dbias (cols, f32) += column sums of dout (rows, cols).
void add_bias(bf16* out, const bf16* bias, int64_t rows, int64_t cols, cudaStream_t stream);
void add_bias_backward(float* dbias, const bf16* dout, int64_t rows, int64_t cols, cudaStream_t stream);

// ---- embedding.cu -------------------------------------------------------------------------------
// out (n, h) = table (vocab, h) rows at ids (n);  dtable (vocab, h, f32) += dout rows at ids.
void embedding_forward(bf16* out, const bf16* table, const int32_t* ids, int64_t n, int64_t h, int64_t vocab,
                       int* err, cudaStream_t stream);
void embedding_backward(float* dtable, const bf16* dout, const int32_t* ids, int64_t n, int64_t h, int64_t vocab,
                        int* err, cudaStream_t stream);

// ---- rmsnorm.cu (h <= kRmsNormMaxHidden) ----------------------------------------------------------
constexpr int64_t kRmsNormMaxHidden = 16384;
// out, x (n, h); weight (h), the gain is offset + weight; rstd (n, f32) or null.
void rmsnorm_forward(bf16* out, float* rstd, const bf16* x, const bf16* weight, int64_t n, int64_t h, float eps,
                     float offset, cudaStream_t stream);
// dx (n, h) overwritten; dweight (h, f32) accumulated.
void rmsnorm_backward(bf16* dx, float* dweight, const bf16* dout, const bf16* x, const bf16* weight,
                      const float* rstd, int64_t n, int64_t h, float offset, cudaStream_t stream);

// ---- rope.cu: x (n, heads, d) rotated in place by sign * angle (sign +1 forward, -1 backward) ----
// inv_freq (d/2, f32) on the device; cos and sin are multiplied by `scale` (YaRN).
void rope(bf16* x, const int32_t* positions, const float* inv_freq, int64_t n, int64_t heads, int64_t d, float scale,
          float sign,
          cudaStream_t stream);

// ---- geglu.cu (n elements): gelu_pytorch_tanh(gate) * up ----------------------------------------------
void geglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t n, cudaStream_t stream);
// dgate may alias gate, dup up.
void geglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t n,
                    cudaStream_t stream);

// ---- swiglu.cu (n elements) ------------------------------------------------------------------------
void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t n, cudaStream_t stream);
// dgate may alias gate and dup may alias up.
void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t n,
                     cudaStream_t stream);

// ---- logprob.cu: logits (n, vocab); per-row outputs (n, f32) -------------------------------------------
void logprob_forward(float* logprob, float* entropy, float* lse, const bf16* logits, const int32_t* targets,
                     int64_t n, int64_t vocab, int* err, cudaStream_t stream);
// dlogits may be logits (in place); dentropy may be null.
void logprob_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* lse,
                      const float* entropy, const float* dlogprob, const float* dentropy, int64_t n, int64_t vocab,
                      cudaStream_t stream);

// ---- adamw.cu ----------------------------------------------------------------------------------------------
// One AdamW step over n f32 elements; bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (computed on the host).
void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, float bc1, float bc2, cudaStream_t stream);
// partials[b] (double) = sum of x^2 over block b's share; returns the number of partials written
// (<= kSumSquaresMaxBlocks). The host adds them, so the result is deterministic.
constexpr int kSumSquaresMaxBlocks = 1024;
template <class T> int sum_squares_partials(double* partials, const T* x, int64_t n, cudaStream_t stream);

// ---- attention.cu / attention_backward.cu (head dim d <= kAttentionMaxHeadDim) -------------------------------
constexpr int kAttentionMaxHeadDim = 256;
struct AttentionDims {
  int64_t n = 0;        // packed query rows
  int hq = 0, hkv = 0;  // query heads, kv heads (hq % hkv == 0)
  int d = 0;            // head dim
  int num_seqs = 0;
  int64_t max_rows = 0;  // most query rows of any sequence (launch size)
  int64_t window = 0;    // > 0: a query sees only the last `window` positions
};
// out, q (n, hq, d); k, v (n, hkv, d); cu_seqlens (num_seqs + 1); lse (n, hq, f32) or null.
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const int32_t* cu_seqlens,
                       const AttentionDims& dims, int* err, cudaStream_t stream);
// delta: (n, hq, f32) scratch. dq (n, hq, d), dk, dv (n, hkv, d) overwritten.
void attention_backward(bf16* dq, bf16* dk, bf16* dv, float* delta, const bf16* dout, const bf16* q, const bf16* k,
                        const bf16* v, const bf16* out, const float* lse, const int32_t* cu_seqlens,
                        const AttentionDims& dims, int* err, cudaStream_t stream);
// Paged: q, out (n, hq, d) rows cu_q[s]..cu_q[s+1] at positions seq_start[s] + i; caches (num_slots, hkv, d);
// block_tables (num_seqs, max_blocks).
struct PagedKv {
  const bf16* k_cache = nullptr;
  const bf16* v_cache = nullptr;
  const int32_t* seq_start = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks = 0, block_size = 0, num_slots = 0;
};
void paged_attention_forward(bf16* out, const bf16* q, const int32_t* cu_q, const PagedKv& kv,
                             const AttentionDims& dims, int* err, cudaStream_t stream);

}  // namespace rlrun::engine::cuda
