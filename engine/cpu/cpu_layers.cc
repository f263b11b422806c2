// cpu_layers.cc - embedding, RMSNorm, rotary embedding and SwiGLU on the CPU.
//
// Parameter gradients (dtable, dweight) are accumulated without races: either each thread owns a
// slice of columns (embedding), or each thread sums into its own buffer and the buffers are
// reduced at the end (RMSNorm).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "engine/bf16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

// ---- embedding ----------------------------------------------------------------------------------

void CpuBackend::embedding_forward_impl(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t vocab = table.shape().rows(), h = table.shape().cols(), n = ids.numel();
  const int32_t* id = ids.i32();
  const bool widen = table.dtype() == DType::kBF16;  // bf16-frozen weights' table (backend.h)
  const float* t = widen ? nullptr : table.f32();
  const uint16_t* t16 = widen ? table.bf16() : nullptr;
  float* o = out.f32();
#pragma omp parallel for num_threads(threads_for(n * h)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    RLRUN_CHECK(id[i] >= 0 && id[i] < vocab, "embedding_forward: id " + std::to_string(id[i]) + " outside [0, " +
                                                 std::to_string(vocab) + ")");
    const int64_t row = static_cast<int64_t>(id[i]) * h;
    float* dst = o + i * h;
    if (widen) {
      for (int64_t c = 0; c < h; ++c) dst[c] = bf16_to_f32(t16[row + c]);
    } else {
      for (int64_t c = 0; c < h; ++c) dst[c] = t[row + c];
    }
  }
}

void CpuBackend::embedding_backward_impl(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const int64_t vocab = dtable.shape().rows(), h = dtable.shape().cols(), n = ids.numel();
  const int32_t* id = ids.i32();
  for (int64_t i = 0; i < n; ++i)
    RLRUN_CHECK(id[i] >= 0 && id[i] < vocab, "embedding_backward: id " + std::to_string(id[i]) + " outside [0, " +
                                                 std::to_string(vocab) + ")");
  float* dt = dtable.f32();
  const float* d = dout.f32();
  // Each thread owns a contiguous slice of the columns, so repeated ids never race.
#pragma omp parallel num_threads(threads_for(n * h))
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t c0 = h * tid / nt, c1 = h * (tid + 1) / nt;
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dt + static_cast<int64_t>(id[i]) * h;
      const float* src = d + i * h;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

// ---- RMSNorm ------------------------------------------------------------------------------------------

void CpuBackend::rmsnorm_forward_impl(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                                      float eps, float offset) {
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  const float *xx = x.f32(), *w = weight.f32();
  float* o = out.f32();
  float* rs = rstd.defined() ? rstd.f32() : nullptr;
#pragma omp parallel for num_threads(threads_for(n * h)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = xx + i * h;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < h; ++c) ss += row[c] * row[c];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(h) + eps);
    float* orow = o + i * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) orow[c] = row[c] * r * (offset + w[c]);
    if (rs) rs[i] = r;
  }
}

// y_c = x_c r g_c with r = (mean(x^2) + eps)^-1/2 and the gain g_c = offset + w_c, so
// dx_c = r (dy_c g_c) - r^3 / H * x_c * sum_j dy_j g_j x_j, and dw_c += dy_c x_c r.
void CpuBackend::rmsnorm_backward_impl(const Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                                       const Tensor& weight, const Tensor& rstd, float offset) {
  const int64_t n = x.shape().rows(), h = x.shape().cols();
  const float *xx = x.f32(), *w = weight.f32(), *dy = dout.f32(), *rs = rstd.f32();
  float *dxx = dx.f32(), *dw = dweight.f32();
  const int nt = threads_for(n * h);
  std::vector<float> partial(static_cast<size_t>(nt) * h, 0.0f);  // per-thread dweight
#pragma omp parallel num_threads(nt)
  {
    float* mine = partial.data() + static_cast<int64_t>(omp_get_thread_num()) * h;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float *xr = xx + i * h, *dyr = dy + i * h;
      const float r = rs[i];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < h; ++c) dot += dyr[c] * (offset + w[c]) * xr[c];
      const float k = r * r * r * dot / static_cast<float>(h);
      float* dxr = dxx + i * h;
#pragma omp simd
      for (int64_t c = 0; c < h; ++c) {
        dxr[c] = r * dyr[c] * (offset + w[c]) - k * xr[c];
        mine[c] += dyr[c] * xr[c] * r;
      }
    }
  }
  for (int t = 0; t < nt; ++t)
    for (int64_t c = 0; c < h; ++c) dw[c] += partial[static_cast<size_t>(t) * h + c];
}

// ---- rotary embedding ---------------------------------------------------------------------------------

namespace {

// Rotates x (N, H, D) in place by +angle (sign 1) or -angle (sign -1), HF rotate_half layout.
void rope_apply(int num_threads, const Tensor& x, const Tensor& positions, const Tensor& freqs, float scale,
                float sign) {
  const int64_t n = x.dim(0), heads = x.dim(1), d = x.dim(2), half = d / 2;
  const float* inv_freq = freqs.f32();
  const int32_t* pos = positions.i32();
  float* xx = x.f32();
#pragma omp parallel num_threads(num_threads)
  {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
      const float p = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = p * inv_freq[i];  // f32 like HF; cos and sin then scaled in f32 (YaRN)
        cs[i] = std::cos(angle) * scale;
        sn[i] = sign * (std::sin(angle) * scale);
      }
      for (int64_t hd = 0; hd < heads; ++hd) {
        float* x1 = xx + (t * heads + hd) * d;
        float* x2 = x1 + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i], b = x2[i];
          x1[i] = a * cs[i] - b * sn[i];
          x2[i] = b * cs[i] + a * sn[i];
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, float scale) {
  rope_apply(threads_for(x.numel()), x, positions, inv_freq, scale, 1.0f);
}

void CpuBackend::rope_backward_impl(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq, float scale) {
  rope_apply(threads_for(dx.numel()), dx, positions, inv_freq, scale, -1.0f);
}

// ---- SwiGLU -------------------------------------------------------------------------------------------

namespace {

// sigmoid through fast_exp of a non-positive argument (its contract), exact to ~1e-7 both ways.
RLRUN_CPU_INLINE float sigmoid(float x) {
  const float e = fast_exp(x < 0.0f ? x : -x);
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}

RLRUN_CPU_INLINE void swiglu_forward_body(float* o, const float* g, const float* u, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] * sigmoid(g[i]) * u[i];
}
RLRUN_CPU_AVX2 void swiglu_forward_avx2(float* o, const float* g, const float* u, int64_t n) {
  swiglu_forward_body(o, g, u, n);
}
void swiglu_forward_base(float* o, const float* g, const float* u, int64_t n) { swiglu_forward_body(o, g, u, n); }

// d up = dout silu(g);  d gate = dout up sig(g) (1 + g (1 - sig(g))).
RLRUN_CPU_INLINE void swiglu_backward_body(float* dg, float* du, const float* dy, const float* g, const float* u,
                                           int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], dyi = dy[i];  // read before writing: dgate/dup may alias gate/up
    const float sig = sigmoid(gi);
    du[i] = dyi * gi * sig;
    dg[i] = dyi * ui * sig * (1.0f + gi * (1.0f - sig));
  }
}
RLRUN_CPU_AVX2 void swiglu_backward_avx2(float* dg, float* du, const float* dy, const float* g, const float* u,
                                         int64_t n) {
  swiglu_backward_body(dg, du, dy, g, u, n);
}
void swiglu_backward_base(float* dg, float* du, const float* dy, const float* g, const float* u, int64_t n) {
  swiglu_backward_body(dg, du, dy, g, u, n);
}

constexpr int64_t kElementwiseChunk = 4096;  // elements per OpenMP task: vector loops, few tasks

}  // namespace

void CpuBackend::swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const float *g = gate.f32(), *u = up.f32();
  float* o = out.f32();
  const int64_t n = gate.numel(), chunks = (n + kElementwiseChunk - 1) / kElementwiseChunk;
  const bool avx2 = avx2_;
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t at = c * kElementwiseChunk, len = std::min(kElementwiseChunk, n - at);
    avx2 ? swiglu_forward_avx2(o + at, g + at, u + at, len) : swiglu_forward_base(o + at, g + at, u + at, len);
  }
}

void CpuBackend::swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                      const Tensor& up) {
  const float *g = gate.f32(), *u = up.f32(), *dy = dout.f32();
  float *dg = dgate.f32(), *du = dup.f32();
  const int64_t n = gate.numel(), chunks = (n + kElementwiseChunk - 1) / kElementwiseChunk;
  const bool avx2 = avx2_;
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t at = c * kElementwiseChunk, len = std::min(kElementwiseChunk, n - at);
    avx2 ? swiglu_backward_avx2(dg + at, du + at, dy + at, g + at, u + at, len)
         : swiglu_backward_base(dg + at, du + at, dy + at, g + at, u + at, len);
  }
}

}  // namespace rlrun::engine::cpu
