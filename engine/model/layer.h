// model/layer.h - one decoder layer as forward pieces and a backward, written against Backend.
// Internal to the model (model/train.cc, model/infer.cc); other components use model.h.
//
//   x_in (N, H)
//   h1   = rmsnorm(x_in) * input_norm                    rstd1 (N)
//   q    = rope(h1 Wq^T + bq)  (N, Hq, D)    k = rope(h1 Wk^T + bk), v = h1 Wv^T + bv  (N, Hkv, D)
//          with qk_norm, rope(rmsnorm_per_head(q_pre) * q_norm): q_pre = h1 Wq^T (+ bq),
//          rstd_q (N*Hq); the same for k; rope with the layer's LayerRope
//   attn = causal GQA attention(q, k, v)  (N, Hq, D)      lse (N, Hq)   [the caller's part]
//   x_mid = x_in + attn Wo^T      (sandwich_norms: x_in + norm(attn_o), attn_o = attn Wo^T, rstd_ao)
//   h2   = rmsnorm(x_mid) * post_norm                    rstd2 (N)
//   m    = act(h2 Wg^T) * (h2 Wu^T)  (N, I)              gate, up (N, I); act silu or gelu_tanh
//   x_out = x_mid + m Wd^T        (sandwich_norms: x_mid + norm(mlp_o), mlp_o = m Wd^T, rstd_mo)
// Every norm multiplies by (norm_weight_offset + weight); q is scaled after RoPE so that the
// attention's 1/sqrt(D) becomes attention_scale() (query_pre_attn_scalar).
// The attention itself is the caller's: packed causal attention in training (PackedAttention
// below), paged attention over the KV cache in inference. Everything else is shared.
#pragma once

#include "engine/backend.h"
#include "engine/model/config.h"
#include "engine/model/lora.h"
#include "engine/model/weights.h"

#include <vector>

namespace rlrun::engine {

// Activations of one layer over N tokens. With `save_stats` false (inference) rstd and lse are
// left undefined and the ops skip them.
struct LayerActs {
  Tensor rstd1, h1, q, k, v, attn, lse, x_mid, rstd2, h2, gate, up, m;
  Tensor q_pre, k_pre, rstd_q, rstd_k;  // qk_norm only: the projections before their norm
  Tensor attn_o, rstd_ao, mlp_o, rstd_mo;  // sandwich_norms only: the branch outputs before their norm
  Tensor xq, xk, xv, xattn, xlse;  // the expanded attention's (PackedAttention::expanded), else undefined
};
LayerActs alloc_layer_acts(Backend& backend, const ModelConfig& config, int64_t n, bool save_stats);
// Bytes alloc_layer_acts(..., save_stats = true) allocates, computed from the shapes (the memory
// plan's estimate), and bytes actually held by `acts`.
int64_t layer_acts_bytes(const ModelConfig& config, int64_t n, DType dtype);
int64_t bytes_of(const LayerActs& acts);

// Gradient scratch shared by every layer of one backward pass.
struct LayerGradScratch {
  Tensor dm, dh, dtmp, dattn, dq, dk, dv;
  Tensor dq_pre, dk_pre;  // qk_norm only
  Tensor dout_pre;        // sandwich_norms only: a branch output's gradient before its norm
  Tensor xdattn, xdq, xdk, xdv;  // expanded attention only
};

// The training attention's view of a packed batch: causal attention within each segment
// (cu_seqlens). With shared prefixes (PackedBatch::prefix_of) the attention runs over an EXPANDED
// copy in which every continuing segment is preceded by its prefixes' tokens: q, k and v rows are
// gathered into it, each compact row's output is picked from one expanded row, and backward sums
// the expanded gradients back onto the compact rows (a prefix's keys and values collect the
// gradients of every continuation). The matmuls run once per compact token. Gathers and sums use
// the embedding ops, so the expanded path needs an f32 compute dtype.
struct PackedAttention {
  Tensor cu_seqlens;           // (S + 1) i32
  int64_t max_seqlen = 0;
  bool expanded = false;
  int64_t n_expanded = 0;
  Tensor gather;               // (N_exp) i32: the compact row of each expanded row
  Tensor pick;                 // (N) i32: the expanded row holding compact row i's output
  Tensor cu_expanded;          // (S_exp + 1) i32
  Tensor q_begin;              // (S_exp) i32: the leading rows of each expanded segment whose
                               // output another segment holds (keys and values only, backend.h)
  int64_t max_expanded = 0;
};
// acts.attn (and acts.lse, or the expanded tensors) from acts.q, k, v.
void packed_attention_forward(Backend& b, const ModelConfig& c, const PackedAttention& layout, int64_t window,
                              LayerActs& acts);
LayerGradScratch alloc_layer_grad_scratch(Backend& backend, const ModelConfig& config, int64_t n);

// What differs between a model's layers: RoPE's inverse frequencies (D/2, f32, on the backend) and
// cos/sin scale (model/rope.h), and the attention window (sliding layers; 0 = full).
struct LayerRope {
  Tensor inv_freq;
  float scale = 1.0f;
  int64_t window = 0;
};
std::vector<LayerRope> make_layer_ropes(Backend& backend, const ModelConfig& config);

// One layer's low-rank adapters as the layer ops see them (model/lora.h): each targeted
// projection y = x W^T gains scale * (x A^T) B^T. `w` null: no adapters. `g` (backward only): where
// dA and dB accumulate. The adapters are f32, so they need an f32 compute dtype.
struct LayerLora {
  const LoraLayer* w = nullptr;
  const LoraLayer* g = nullptr;
  float scale = 0.0f;
};

// h1, q, k, v of `acts` from x_in; positions (N, i32).
void layer_qkv_forward(Backend& b, const ModelConfig& c, const LayerWeights& w, const LayerRope& rope,
                       const Tensor& x_in, const Tensor& positions, LayerActs& acts, const LayerLora& lora = {});
// x_mid, h2, gate, up, m of `acts` and x_out, from x_in and acts.attn.
void layer_post_attention_forward(Backend& b, const ModelConfig& c, const LayerWeights& w, const Tensor& x_in,
                                  LayerActs& acts, const Tensor& x_out, const LayerLora& lora = {});

// Backward of the whole layer (training attention). dx holds d(x_out) on entry and d(x_in) on
// return. Parameter gradients are accumulated into g; a frozen base passes g with the projection
// and bias gradients undefined (they are skipped) and the norms' pointing at a sink
// (alloc_norm_grad_sink). The adapters' gradients go to lora.g. acts.gate and acts.up are
// overwritten (they become their own gradients), so a layer's acts serve one backward only.
void layer_backward(Backend& b, const ModelConfig& c, const LayerWeights& w, const LayerGrads& g,
                    const LayerRope& rope, const Tensor& x_in, const Tensor& positions, const PackedAttention& layout,
                    LayerActs& acts, LayerGradScratch& s, const Tensor& dx, const LayerLora& lora = {});

// Grads for a frozen base: only the norm gains are defined (the backend's norm backward always
// writes a weight gradient), zeroed f32 buffers that every layer shares and nothing reads.
LayerGrads alloc_norm_grad_sink(Backend& backend, const ModelConfig& config);

}  // namespace rlrun::engine
