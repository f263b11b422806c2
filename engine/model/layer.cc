#include "engine/model/layer.h"

#include <cmath>

#include "engine/model/rope.h"

namespace rlrun::engine {

namespace {

struct Dims {
  int64_t h, hq, hkv, d, i;
};
Dims dims(const ModelConfig& c) {
  return {c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim(), c.intermediate_size};
}

// (N, H, D) -> (N, H*D), the matrix view matmul and add_bias read.
Tensor flat2(const Tensor& t) { return t.view({t.dim(0), t.numel() / t.dim(0)}); }

// The attention ops scale scores by 1/sqrt(D); q times this makes it c.attention_scale()
// (Gemma's query_pre_attn_scalar). 1 otherwise.
float query_scale(const ModelConfig& c) {
  if (c.query_pre_attn_scalar <= 0) return 1.0f;
  return static_cast<float>(c.attention_scale() * std::sqrt(static_cast<double>(c.head_dim())));
}

// (N, H, D) -> (N*H, D): one row per head, what the per-head norms read.
Tensor heads_as_rows(const Tensor& t) { return t.view({t.dim(0) * t.dim(1), t.dim(2)}); }

// One projection's adapter: A (r, in), B (out, r), their gradients, alpha / r. Undefined `a`:
// the projection has none.
struct Adapter {
  Tensor a, b, da, db;
  float scale = 0.0f;
};

Adapter adapter_of(const LayerLora& l, LoraTarget t) {
  if (l.w == nullptr) return {};
  const int i = static_cast<int>(t);
  Adapter ad{(*l.w)[i].a, (*l.w)[i].b, Tensor(), Tensor(), l.scale};
  if (l.g != nullptr) ad.da = (*l.g)[i].a, ad.db = (*l.g)[i].b;
  return ad;
}

// y = x W^T (+ b) (+ s (x A^T) B^T)
void linear(Backend& b, const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, const Adapter& ad = {}) {
  b.matmul(flat2(y), x, w, false, true);
  if (bias.defined()) b.add_bias(flat2(y), bias);
  if (!ad.a.defined()) return;
  const Tensor t = b.uninitialized({x.dim(0), ad.a.dim(0)}, DType::kF32);  // x A^T (N, r)
  b.matmul(t, x, ad.a, false, true);
  b.matmul(flat2(y), t, ad.b, false, true, ad.scale, 1.0f);
}

// dx (+)= dy W;  dW += dy^T x (dw undefined: a frozen base);  db += colsum(dy).
// The adapter, with t = x A^T recomputed (N, r: cheaper than keeping it):
//   dB += s dy^T t;  dt = s dy B;  dA += dt^T x;  dx += dt A
void linear_backward(Backend& b, const Tensor& dx, bool accumulate_dx, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& dw, const Tensor& dbias, const Adapter& ad = {}) {
  b.matmul(dx, flat2(dy), w, false, false, 1.0f, accumulate_dx ? 1.0f : 0.0f);
  if (dw.defined()) b.matmul(dw, flat2(dy), x, true, false, 1.0f, 1.0f);
  if (dbias.defined()) b.add_bias_backward(dbias, flat2(dy));
  if (!ad.a.defined()) return;
  const int64_t n = x.dim(0), r = ad.a.dim(0);
  const Tensor t = b.uninitialized({n, r}, DType::kF32), dt = b.uninitialized({n, r}, DType::kF32);
  b.matmul(t, x, ad.a, false, true);
  b.matmul(ad.db, flat2(dy), t, true, false, ad.scale, 1.0f);
  b.matmul(dt, flat2(dy), ad.b, false, false, ad.scale, 0.0f);
  b.matmul(ad.da, dt, x, true, false, 1.0f, 1.0f);
  b.matmul(dx, dt, ad.a, false, false, 1.0f, 1.0f);
}

}  // namespace

LayerActs alloc_layer_acts(Backend& b, const ModelConfig& c, int64_t n, bool save_stats) {
  const Dims d = dims(c);
  const DType t = b.compute_dtype();
  // Every buffer is an op's whole output before anything reads it (layer_*_forward).
  LayerActs a;
  if (save_stats) {
    a.rstd1 = b.uninitialized({n}, DType::kF32);
    a.rstd2 = b.uninitialized({n}, DType::kF32);
    a.lse = b.uninitialized({n, d.hq}, DType::kF32);
  }
  a.h1 = b.uninitialized({n, d.h}, t);
  if (c.qk_norm) {
    a.q_pre = b.uninitialized({n, d.hq, d.d}, t);
    a.k_pre = b.uninitialized({n, d.hkv, d.d}, t);
    if (save_stats) {
      a.rstd_q = b.uninitialized({n * d.hq}, DType::kF32);
      a.rstd_k = b.uninitialized({n * d.hkv}, DType::kF32);
    }
  }
  a.q = b.uninitialized({n, d.hq, d.d}, t);
  a.k = b.uninitialized({n, d.hkv, d.d}, t);
  a.v = b.uninitialized({n, d.hkv, d.d}, t);
  a.attn = b.uninitialized({n, d.hq, d.d}, t);
  a.x_mid = b.uninitialized({n, d.h}, t);
  if (c.sandwich_norms) {
    a.attn_o = b.uninitialized({n, d.h}, t);
    a.mlp_o = b.uninitialized({n, d.h}, t);
    if (save_stats) {
      a.rstd_ao = b.uninitialized({n}, DType::kF32);
      a.rstd_mo = b.uninitialized({n}, DType::kF32);
    }
  }
  a.h2 = b.uninitialized({n, d.h}, t);
  a.gate = b.uninitialized({n, d.i}, t);
  a.up = b.uninitialized({n, d.i}, t);
  a.m = b.uninitialized({n, d.i}, t);
  return a;
}

int64_t layer_acts_bytes(const ModelConfig& c, int64_t n, DType dtype) {
  const Dims d = dims(c);
  int64_t stats = (2 * n + n * d.hq) * 4;
  int64_t elems = n * (3 * d.h + 2 * d.hq * d.d + 2 * d.hkv * d.d + 3 * d.i);
  if (c.qk_norm) {
    stats += n * (d.hq + d.hkv) * 4;
    elems += n * (d.hq + d.hkv) * d.d;
  }
  if (c.sandwich_norms) {
    stats += 2 * n * 4;
    elems += 2 * n * d.h;
  }
  return stats + elems * static_cast<int64_t>(dtype_size(dtype));
}

int64_t bytes_of(const LayerActs& a) {
  int64_t total = 0;
  for (const Tensor* t : {&a.rstd1, &a.h1, &a.q, &a.k, &a.v, &a.attn, &a.lse, &a.x_mid, &a.rstd2, &a.h2, &a.gate,
                          &a.up, &a.m, &a.q_pre, &a.k_pre, &a.rstd_q, &a.rstd_k, &a.attn_o, &a.rstd_ao,
                          &a.mlp_o, &a.rstd_mo, &a.xq, &a.xk, &a.xv, &a.xattn,
                          &a.xlse})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

LayerGradScratch alloc_layer_grad_scratch(Backend& b, const ModelConfig& c, int64_t n) {
  const Dims d = dims(c);
  const DType t = b.compute_dtype();
  LayerGradScratch s;
  s.dm = b.zeros({n, d.i}, t);
  s.dh = b.zeros({n, d.h}, t);
  s.dtmp = b.zeros({n, d.h}, t);
  s.dattn = b.zeros({n, d.hq, d.d}, t);
  s.dq = b.zeros({n, d.hq, d.d}, t);
  s.dk = b.zeros({n, d.hkv, d.d}, t);
  s.dv = b.zeros({n, d.hkv, d.d}, t);
  if (c.qk_norm) {
    s.dq_pre = b.zeros({n, d.hq, d.d}, t);
    s.dk_pre = b.zeros({n, d.hkv, d.d}, t);
  }
  if (c.sandwich_norms) s.dout_pre = b.zeros({n, d.h}, t);
  return s;
}

std::vector<LayerRope> make_layer_ropes(Backend& b, const ModelConfig& c) {
  std::vector<LayerRope> ropes;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::vector<float> f = rope_inv_freq(c, l);
    ropes.push_back({from_host(b, {static_cast<int64_t>(f.size())}, f), rope_scale(c, l),
                     c.is_sliding(l) ? c.sliding_window : 0});
  }
  return ropes;
}

void layer_qkv_forward(Backend& b, const ModelConfig& c, const LayerWeights& w, const LayerRope& rope,
                       const Tensor& x_in, const Tensor& positions, LayerActs& a, const LayerLora& lora) {
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float off = static_cast<float>(c.norm_weight_offset);
  b.rmsnorm_forward(a.h1, a.rstd1, x_in, w.input_norm, eps, off);
  linear(b, c.qk_norm ? a.q_pre : a.q, a.h1, w.q, w.q_bias, adapter_of(lora, LoraTarget::kQ));
  linear(b, c.qk_norm ? a.k_pre : a.k, a.h1, w.k, w.k_bias, adapter_of(lora, LoraTarget::kK));
  linear(b, a.v, a.h1, w.v, w.v_bias, adapter_of(lora, LoraTarget::kV));
  if (c.qk_norm) {  // per head: (N * H, D) rows
    b.rmsnorm_forward(heads_as_rows(a.q), a.rstd_q, heads_as_rows(a.q_pre), w.q_norm, eps, off);
    b.rmsnorm_forward(heads_as_rows(a.k), a.rstd_k, heads_as_rows(a.k_pre), w.k_norm, eps, off);
  }
  b.rope_forward(a.q, positions, rope.inv_freq, rope.scale);
  b.rope_forward(a.k, positions, rope.inv_freq, rope.scale);
  if (const float qs = query_scale(c); qs != 1.0f) b.scale(a.q, qs);
}

namespace {

// dst (compact) = the sum over expanded rows r of src[r] into row index[r]; dst is zeroed first.
void sum_rows_into(Backend& b, const Tensor& dst, const Tensor& src, const Tensor& index) {
  b.fill_zero(dst);
  b.embedding_backward(flat2(dst), flat2(src), index);
}

// q, k, v and the attention output (or their gradients) over n rows, each written whole by the
// first op that touches it.
void alloc_attention_set(Backend& b, const Dims& d, int64_t n, Tensor& q, Tensor& k, Tensor& v, Tensor& out) {
  const DType t = b.compute_dtype();
  q = b.uninitialized({n, d.hq, d.d}, t);
  k = b.uninitialized({n, d.hkv, d.d}, t);
  v = b.uninitialized({n, d.hkv, d.d}, t);
  out = b.uninitialized({n, d.hq, d.d}, t);
}

}  // namespace

void packed_attention_forward(Backend& b, const ModelConfig& c, const PackedAttention& layout, int64_t window,
                              LayerActs& a) {
  if (!layout.expanded) {
    b.attention_forward(a.attn, a.lse, a.q, a.k, a.v, layout.cu_seqlens, layout.max_seqlen, window);
    return;
  }
  const Dims d = dims(c);
  const int64_t ne = layout.n_expanded;
  if (!a.xq.defined()) {
    alloc_attention_set(b, d, ne, a.xq, a.xk, a.xv, a.xattn);
    a.xlse = b.uninitialized({ne, d.hq}, DType::kF32);
  }
  b.embedding_forward(flat2(a.xq), flat2(a.q), layout.gather);
  b.embedding_forward(flat2(a.xk), flat2(a.k), layout.gather);
  b.embedding_forward(flat2(a.xv), flat2(a.v), layout.gather);
  // Each expanded row holds its prefixes' tokens right before its own, in position order, so
  // the window counts positions here too.
  b.attention_forward(a.xattn, a.xlse, a.xq, a.xk, a.xv, layout.cu_expanded, layout.max_expanded, window,
                      layout.q_begin);
  b.embedding_forward(flat2(a.attn), flat2(a.xattn), layout.pick);
}

void layer_post_attention_forward(Backend& b, const ModelConfig& c, const LayerWeights& w, const Tensor& x_in,
                                  LayerActs& a, const Tensor& x_out, const LayerLora& lora) {
  const float eps = static_cast<float>(c.rms_norm_eps), off = static_cast<float>(c.norm_weight_offset);
  if (c.sandwich_norms) {  // x_mid = x_in + norm(attn Wo^T)
    linear(b, a.attn_o, flat2(a.attn), w.o, Tensor(), adapter_of(lora, LoraTarget::kO));
    b.rmsnorm_forward(a.x_mid, a.rstd_ao, a.attn_o, w.attn_out_norm, eps, off);
  } else {
    linear(b, a.x_mid, flat2(a.attn), w.o, Tensor(), adapter_of(lora, LoraTarget::kO));  // attn Wo^T
  }
  b.add(a.x_mid, a.x_mid, x_in);
  b.rmsnorm_forward(a.h2, a.rstd2, a.x_mid, w.post_norm, eps, off);
  linear(b, a.gate, a.h2, w.gate, Tensor(), adapter_of(lora, LoraTarget::kGate));
  linear(b, a.up, a.h2, w.up, Tensor(), adapter_of(lora, LoraTarget::kUp));
  if (c.hidden_act == "gelu_pytorch_tanh") {
    b.geglu_forward(a.m, a.gate, a.up);
  } else {
    b.swiglu_forward(a.m, a.gate, a.up);
  }
  if (c.sandwich_norms) {  // x_out = x_mid + norm(m Wd^T)
    linear(b, a.mlp_o, a.m, w.down, Tensor(), adapter_of(lora, LoraTarget::kDown));
    b.rmsnorm_forward(x_out, a.rstd_mo, a.mlp_o, w.mlp_out_norm, eps, off);
  } else {
    linear(b, x_out, a.m, w.down, Tensor(), adapter_of(lora, LoraTarget::kDown));  // m Wd^T
  }
  b.add(x_out, x_out, a.x_mid);
}

namespace {

// s.dq, s.dk, s.dv from s.dattn.
void packed_attention_backward(Backend& b, const ModelConfig& c, const PackedAttention& layout, int64_t window,
                               const LayerActs& a, LayerGradScratch& s) {
  if (!layout.expanded) {
    b.attention_backward(s.dq, s.dk, s.dv, s.dattn, a.q, a.k, a.v, a.attn, a.lse, layout.cu_seqlens,
                         layout.max_seqlen, window);
    return;
  }
  const Dims d = dims(c);
  const int64_t ne = layout.n_expanded;
  if (!s.xdattn.defined()) alloc_attention_set(b, d, ne, s.xdq, s.xdk, s.xdv, s.xdattn);
  // Only the picked expanded rows carry an output gradient; the others' is zero.
  sum_rows_into(b, s.xdattn, s.dattn, layout.pick);
  b.attention_backward(s.xdq, s.xdk, s.xdv, s.xdattn, a.xq, a.xk, a.xv, a.xattn, a.xlse, layout.cu_expanded,
                       layout.max_expanded, window, layout.q_begin);
  sum_rows_into(b, s.dq, s.xdq, layout.gather);
  sum_rows_into(b, s.dk, s.xdk, layout.gather);
  sum_rows_into(b, s.dv, s.xdv, layout.gather);
}

}  // namespace

void layer_backward(Backend& b, const ModelConfig& c, const LayerWeights& w, const LayerGrads& g,
                    const LayerRope& rope, const Tensor& x_in, const Tensor& positions, const PackedAttention& layout,
                    LayerActs& a, LayerGradScratch& s, const Tensor& dx, const LayerLora& lora) {
  const Adapter ad_down = adapter_of(lora, LoraTarget::kDown), ad_o = adapter_of(lora, LoraTarget::kO);
  const float off = static_cast<float>(c.norm_weight_offset);
  // MLP: dx is d(x_out) = d(x_mid) through the residual, plus the MLP branch below.
  if (c.sandwich_norms) {
    b.rmsnorm_backward(s.dout_pre, g.mlp_out_norm, dx, a.mlp_o, w.mlp_out_norm, a.rstd_mo, off);
    linear_backward(b, s.dm, false, s.dout_pre, a.m, w.down, g.down, Tensor(), ad_down);
  } else {
    linear_backward(b, s.dm, false, dx, a.m, w.down, g.down, Tensor(), ad_down);
  }
  if (c.hidden_act == "gelu_pytorch_tanh") {
    b.geglu_backward(a.gate, a.up, s.dm, a.gate, a.up);  // in place: gate, up become dgate, dup
  } else {
    b.swiglu_backward(a.gate, a.up, s.dm, a.gate, a.up);
  }
  linear_backward(b, s.dh, false, a.gate, a.h2, w.gate, g.gate, Tensor(), adapter_of(lora, LoraTarget::kGate));
  linear_backward(b, s.dh, true, a.up, a.h2, w.up, g.up, Tensor(), adapter_of(lora, LoraTarget::kUp));
  b.rmsnorm_backward(s.dtmp, g.post_norm, s.dh, a.x_mid, w.post_norm, a.rstd2, off);
  b.axpy(dx, 1.0f, s.dtmp);  // dx = d(x_mid)

  // Attention: d(x_mid) = d(x_in) through the residual, plus the attention branch below.
  if (c.sandwich_norms) {
    b.rmsnorm_backward(s.dout_pre, g.attn_out_norm, dx, a.attn_o, w.attn_out_norm, a.rstd_ao, off);
    linear_backward(b, flat2(s.dattn), false, s.dout_pre, flat2(a.attn), w.o, g.o, Tensor(), ad_o);
  } else {
    linear_backward(b, flat2(s.dattn), false, dx, flat2(a.attn), w.o, g.o, Tensor(), ad_o);
  }
  packed_attention_backward(b, c, layout, rope.window, a, s);
  if (const float qs = query_scale(c); qs != 1.0f) b.scale(s.dq, qs);
  b.rope_backward(s.dq, positions, rope.inv_freq, rope.scale);
  b.rope_backward(s.dk, positions, rope.inv_freq, rope.scale);
  if (c.qk_norm) {
    b.rmsnorm_backward(heads_as_rows(s.dq_pre), g.q_norm, heads_as_rows(s.dq), heads_as_rows(a.q_pre), w.q_norm,
                       a.rstd_q, off);
    b.rmsnorm_backward(heads_as_rows(s.dk_pre), g.k_norm, heads_as_rows(s.dk), heads_as_rows(a.k_pre), w.k_norm,
                       a.rstd_k, off);
  }
  linear_backward(b, s.dh, false, c.qk_norm ? s.dq_pre : s.dq, a.h1, w.q, g.q, g.q_bias,
                  adapter_of(lora, LoraTarget::kQ));
  linear_backward(b, s.dh, true, c.qk_norm ? s.dk_pre : s.dk, a.h1, w.k, g.k, g.k_bias,
                  adapter_of(lora, LoraTarget::kK));
  linear_backward(b, s.dh, true, s.dv, a.h1, w.v, g.v, g.v_bias, adapter_of(lora, LoraTarget::kV));
  b.rmsnorm_backward(s.dtmp, g.input_norm, s.dh, x_in, w.input_norm, a.rstd1, off);
  b.axpy(dx, 1.0f, s.dtmp);  // dx = d(x_in)
}

LayerGrads alloc_norm_grad_sink(Backend& b, const ModelConfig& c) {
  LayerGrads g;
  g.input_norm = b.zeros({c.hidden_size}, DType::kF32);
  g.post_norm = b.zeros({c.hidden_size}, DType::kF32);
  if (c.qk_norm) {
    g.q_norm = b.zeros({c.head_dim()}, DType::kF32);
    g.k_norm = b.zeros({c.head_dim()}, DType::kF32);
  }
  if (c.sandwich_norms) {
    g.attn_out_norm = b.zeros({c.hidden_size}, DType::kF32);
    g.mlp_out_norm = b.zeros({c.hidden_size}, DType::kF32);
  }
  return g;
}

}  // namespace rlrun::engine
