// op_reference.h - straightforward double-precision references for the backend ops (row-major,
// flat token-major like the backend). Written for clarity, not speed: attention builds each
// sequence's full masked score matrix.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rlrun::engine::testing {

using Vec = std::vector<double>;

// out (M, N) = op(a) op(b); a is (M, K) or (K, M) with ta, b is (K, N) or (N, K) with tb.
inline Vec ref_matmul(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  Vec out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      out[i * n + j] = s;
    }
  return out;
}

// x (N, H), w (H) -> y (N, H); rstd (N) when asked.
inline Vec ref_rmsnorm(const Vec& x, const Vec& w, int64_t n, int64_t h, double eps, Vec* rstd = nullptr) {
  Vec y(x.size());
  if (rstd) rstd->assign(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0.0;
    for (int64_t c = 0; c < h; ++c) ss += x[i * h + c] * x[i * h + c];
    const double r = 1.0 / std::sqrt(ss / h + eps);
    for (int64_t c = 0; c < h; ++c) y[i * h + c] = x[i * h + c] * r * w[c];
    if (rstd) (*rstd)[i] = r;
  }
  return y;
}

// x (N, H, D) rotated by position * theta^(-2i/D), rotate_half pairs (i, i + D/2).
// RoPE with given inverse frequencies (d/2) and cos/sin scale.
inline Vec ref_rope_freqs(const Vec& x, const std::vector<int32_t>& pos, int64_t h, int64_t d, const Vec& inv_freq,
                          double scale) {
  Vec y(x.size());
  const int64_t n = static_cast<int64_t>(pos.size()), half = d / 2;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t hd = 0; hd < h; ++hd)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos[t] * inv_freq[i];
        const int64_t base = (t * h + hd) * d;
        const double a = x[base + i], b = x[base + i + half];
        y[base + i] = scale * (a * std::cos(angle) - b * std::sin(angle));
        y[base + i + half] = scale * (b * std::cos(angle) + a * std::sin(angle));
      }
  return y;
}

inline Vec ref_rope(const Vec& x, const std::vector<int32_t>& pos, int64_t h, int64_t d, double theta) {
  Vec inv_freq(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / d);
  return ref_rope_freqs(x, pos, h, d, inv_freq, 1.0);
}

// Naive causal GQA attention over packed sequences: q (N, Hq, D), k, v (N, Hkv, D); window > 0:
// row i sees rows i - window + 1 .. i of its sequence.
inline Vec ref_attention(const Vec& q, const Vec& k, const Vec& v, const std::vector<int32_t>& cu, int64_t hq,
                         int64_t hkv, int64_t d, Vec* lse = nullptr, int64_t window = 0) {
  Vec out(q.size(), 0.0);
  const int64_t n = cu.back();
  if (lse) lse->assign(static_cast<size_t>(n * hq), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t b = cu[s], len = cu[s + 1] - cu[s];
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      std::vector<Vec> scores(static_cast<size_t>(len), Vec(static_cast<size_t>(len), -INFINITY));
      for (int64_t i = 0; i < len; ++i)
        for (int64_t j = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0; j <= i; ++j) {
          double sc = 0.0;
          for (int64_t c = 0; c < d; ++c) sc += q[((b + i) * hq + h) * d + c] * k[((b + j) * hkv + g) * d + c];
          scores[i][j] = sc * scale;
        }
      for (int64_t i = 0; i < len; ++i) {
        const double m = *std::max_element(scores[i].begin(), scores[i].end());
        double z = 0.0;
        for (int64_t j = 0; j <= i; ++j) z += std::exp(scores[i][j] - m);  // -inf outside: exp 0
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(scores[i][j] - m) / z;
          for (int64_t c = 0; c < d; ++c) out[((b + i) * hq + h) * d + c] += p * v[((b + j) * hkv + g) * d + c];
        }
        if (lse) (*lse)[(b + i) * hq + h] = m + std::log(z);
      }
    }
  }
  return out;
}

// gelu_pytorch_tanh(gate) * up (Gemma's GeGLU).
inline Vec ref_geglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  const double c = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    out[i] = 0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g))) * up[i];
  }
  return out;
}

inline Vec ref_swiglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

// logits (N, V): log-prob of each target (0 where target < 0), entropy and logsumexp of each row.
inline void ref_logprob(const Vec& logits, const std::vector<int32_t>& targets, int64_t v, Vec* logprob,
                        Vec* entropy, Vec* lse = nullptr) {
  const size_t n = targets.size();
  logprob->assign(n, 0.0);
  entropy->assign(n, 0.0);
  if (lse) lse->assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double* row = logits.data() + i * v;
    const double m = *std::max_element(row, row + v);
    double z = 0.0;
    for (int64_t c = 0; c < v; ++c) z += std::exp(row[c] - m);
    const double l = m + std::log(z);
    double h = 0.0;
    for (int64_t c = 0; c < v; ++c) h -= std::exp(row[c] - l) * (row[c] - l);
    (*entropy)[i] = h;
    if (targets[i] >= 0) (*logprob)[i] = row[targets[i]] - l;
    if (lse) (*lse)[i] = l;
  }
}

}  // namespace rlrun::engine::testing
