// logprob.cu - fused log-softmax + gather + entropy over the vocabulary, one block per row.
//
// Forward makes ONE pass over the row: each thread keeps an online state over its elements,
//   m = max z,  s = sum e^(z - m),  w = sum e^(z - m) (z - m),
// rescaled whenever m grows; the block then merges the thread states. From the merged state:
//   lse = m + log s,  entropy = log s - w / s,  logprob = z_target - lse.
// (w is kept relative to m, not as sum e^(z - m) z, so a near-zero entropy of large logits does
// not cancel catastrophically.) Nothing of size V is stored.
// Backward recomputes p_v = exp(z_v - lse) per element and may write dlogits over the logits:
//   dz_v = dlogprob (1[v = t] - p_v) - dentropy p_v (log p_v + entropy).
#include <cfloat>

#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 512;

struct SoftmaxState {
  float m, s, w;
};

__device__ __forceinline__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
  if (a.s == 0.0f) return b;
  if (b.s == 0.0f) return a;
  const float m = fmaxf(a.m, b.m);
  const float ea = expf(a.m - m), eb = expf(b.m - m);
  return {m, a.s * ea + b.s * eb, ea * (a.w + (a.m - m) * a.s) + eb * (b.w + (b.m - m) * b.s)};
}

__global__ void logprob_forward_kernel(float* logprob, float* entropy, float* lse, const bf16* logits,
                                       const int32_t* targets, int64_t vocab, int* err) {
  __shared__ SoftmaxState per_warp[kThreads / 32];
  const int64_t row = blockIdx.x;
  const bf16* z = logits + row * vocab;
  SoftmaxState st{-FLT_MAX, 0.0f, 0.0f};
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) {
    const float x = __bfloat162float(z[v]);
    if (st.s == 0.0f) {
      st = {x, 1.0f, 0.0f};
    } else if (x > st.m) {
      const float e = expf(st.m - x);
      st.w = e * (st.w + (st.m - x) * st.s);
      st.s = st.s * e + 1.0f;
      st.m = x;
    } else {
      const float e = expf(x - st.m);
      st.s += e;
      st.w += e * (x - st.m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const SoftmaxState other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                             __shfl_xor_sync(0xffffffffu, st.w, o)};
    st = merge(st, other);
  }
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = st;
  __syncthreads();
  if (threadIdx.x != 0) return;
  st = per_warp[0];
  for (int i = 1; i < kThreads / 32; ++i) st = merge(st, per_warp[i]);
  const float log_s = logf(st.s);
  const float row_lse = st.m + log_s;
  lse[row] = row_lse;
  entropy[row] = log_s - st.w / st.s;
  const int32_t t = targets[row];
  if (t >= vocab) atomicOr(err, kErrLogprobTarget);
  logprob[row] = (t >= 0 && t < vocab) ? __bfloat162float(z[t]) - row_lse : 0.0f;
}

__global__ void logprob_backward_kernel(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* lse,
                                        const float* entropy, const float* dlogprob, const float* dentropy,
                                        int64_t vocab) {
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  const float g_lp = t >= 0 ? dlogprob[row] : 0.0f;
  const float g_ent = dentropy != nullptr ? dentropy[row] : 0.0f;
  const float row_lse = lse[row], h = entropy[row];
  const bf16* z = logits + row * vocab;
  bf16* dz = dlogits + row * vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) {
    const float logp = __bfloat162float(z[v]) - row_lse;
    const float p = expf(logp);
    float d = -g_lp * p - g_ent * p * (logp + h);
    if (v == t) d += g_lp;
    dz[v] = __float2bfloat16_rn(d);  // after the read of z[v]: in place is safe
  }
}

}  // namespace

void logprob_forward(float* logprob, float* entropy, float* lse, const bf16* logits, const int32_t* targets,
                     int64_t n, int64_t vocab, int* err, cudaStream_t stream) {
  if (n == 0) return;
  logprob_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(logprob, entropy, lse, logits, targets,
                                                                             vocab, err);
  CUDA_CHECK_LAUNCH();
}

void logprob_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* lse,
                      const float* entropy, const float* dlogprob, const float* dentropy, int64_t n, int64_t vocab,
                      cudaStream_t stream) {
  if (n == 0) return;
  logprob_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(dlogits, logits, targets, lse, entropy,
                                                                              dlogprob, dentropy, vocab);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
