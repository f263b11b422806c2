// cpu_geglu.cc - GeGLU (Gemma's MLP): out = gelu_tanh(gate) * up and its backward, in f32 like
// torch's gelu(approximate="tanh"):
//   gelu(g) = g/2 (1 + t), t = tanh(c (g + 0.044715 g^3)), c = sqrt(2/pi)
//   d up = dout gelu(g);   d gate = dout up (0.5 (1 + t) + 0.5 g (1 - t^2) c (1 + 3 * 0.044715 g^2))
#include <cmath>

#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine::cpu {
namespace {

constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;

float tanh_arg(float g) { return kC * (g + kA * g * g * g); }

}  // namespace

void CpuBackend::geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const float *g = gate.f32(), *u = up.f32();
  float* o = out.f32();
  const int64_t n = gate.numel();
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * g[i] * (1.0f + std::tanh(tanh_arg(g[i]))) * u[i];
}

void CpuBackend::geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                     const Tensor& up) {
  const float *g = gate.f32(), *u = up.f32(), *dy = dout.f32();
  float *dg = dgate.f32(), *du = dup.f32();
  const int64_t n = gate.numel();
#pragma omp parallel for num_threads(threads_for(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], dyi = dy[i];  // read before writing: dgate/dup may alias gate/up
    const float t = std::tanh(tanh_arg(gi));
    const float dgelu = 0.5f * (1.0f + t) + 0.5f * gi * (1.0f - t * t) * kC * (1.0f + 3.0f * kA * gi * gi);
    du[i] = dyi * 0.5f * gi * (1.0f + t);
    dg[i] = dyi * ui * dgelu;
  }
}

}  // namespace rlrun::engine::cpu
