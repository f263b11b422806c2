// model/weights.h - every parameter of the decoder, by its HF name, in ONE flat buffer.
//
// Layout (the order of params(), which checkpoint IO, the optimizer and weight sync iterate):
//   model.embed_tokens.weight                         (V, H)
//   per layer i, prefix model.layers.{i}.:
//     input_layernorm.weight                          (H)
//     self_attn.q_proj.weight (Hq*D, H)  [.bias (Hq*D)  qkv_bias only]
//     self_attn.k_proj.weight (Hkv*D, H) [.bias (Hkv*D)]
//     self_attn.v_proj.weight (Hkv*D, H) [.bias (Hkv*D)]
//     self_attn.q_norm.weight (D), self_attn.k_norm.weight (D)   qk_norm only
//     self_attn.o_proj.weight (H, Hq*D)
//     post_attention_layernorm.weight                 (H)  the MLP's input norm; with sandwich_norms
//                                                          the attention output's norm, and then:
//     pre_feedforward_layernorm.weight                (H)  sandwich_norms: the MLP's input norm
//     mlp.gate_proj.weight (I, H), mlp.up_proj.weight (I, H), mlp.down_proj.weight (H, I)
//     post_feedforward_layernorm.weight               (H)  sandwich_norms: the MLP output's norm
//   model.norm.weight                                 (H)
//   lm_head.weight                                    (V, H)   absent when tie_embeddings
// Linear weights are (out_features, in_features) row-major, exactly like torch.nn.Linear, so an
// HF safetensors tensor copies in byte for byte.
//
// Every tensor starts at an element offset that is a multiple of kParamAlign (so device kernels
// see aligned rows); the few padding elements between tensors are zero and stay zero (their
// gradient is zero). The flat buffers are:
//   master   f32 (P)  the weights loading writes and the optimizer updates (checkpoints, export)
//   compute  compute_dtype (P): the weights ops read. On an f32 backend it IS master (same
//            storage); on a bf16 backend it is a copy refreshed by sync_compute(). A trainer whose
//            distributed optimizer keeps the master of its own shard (trainer/optimizer.h)
//            releases this full master: release_master().
//   grad     f32 (P)  accumulated by backward; can be released (freed) and restored (zeroed),
//            for `weight_broadcast_free_grad_buffers`.
//
// Ownership: a ModelWeights owns its buffers; the Backend must outlive it. Per-tensor views share
// the flat storage, so writing a view writes the flat buffer. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/config.h"
#include "engine/tensor.h"

namespace rlrun::engine {

constexpr int64_t kParamAlign = 64;  // elements

struct ParamInfo {
  std::string name;   // HF name, e.g. "model.layers.3.mlp.up_proj.weight"
  Shape shape;
  int64_t offset = 0;  // element offset in the flat buffers, a multiple of kParamAlign
  int64_t numel = 0;
  bool is_norm = false;  // RMSNorm gains: initialised to 1 (and usually exempt from weight decay)
  bool is_bias = false;  // initialised to 0
};

// The parameter list of `config` in the order above, with offsets. Pure function of the config.
std::vector<ParamInfo> parameter_layout(const ModelConfig& config);
// Total elements of the flat buffers (including alignment padding).
int64_t flat_parameter_count(const std::vector<ParamInfo>& layout);

// Compute-dtype views of one decoder layer's weights (biases undefined unless qkv_bias; q_norm,
// k_norm unless qk_norm; attn_out_norm, mlp_out_norm unless sandwich_norms). post_norm is the
// MLP's input norm whatever its HF name.
struct LayerWeights {
  Tensor input_norm, q, q_bias, k, k_bias, v, v_bias, q_norm, k_norm, o, attn_out_norm, post_norm, gate, up, down,
      mlp_out_norm;
};
// The same views into the f32 grad buffer.
using LayerGrads = LayerWeights;

class ModelWeights {
 public:
  // Allocates zeroed master, compute and grad buffers on `backend` (which must outlive this).
  ModelWeights(Backend& backend, const ModelConfig& config);
  ModelWeights(const ModelWeights&) = delete;  // a copy would share (not copy) the buffers
  ModelWeights& operator=(const ModelWeights&) = delete;

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  const std::vector<ParamInfo>& params() const { return layout_; }
  int64_t flat_size() const { return flat_size_; }
  // Index of the parameter called `name`, or not_found naming it.
  Result<size_t> index_of(std::string_view name) const;

  // ---- master weights (f32) ----
  // False after release_master(): then compute_flat() holds the only full copy of the weights.
  bool has_master() const { return master_.defined(); }
  const Tensor& master_flat() const;  // aborts when released
  Tensor master(size_t i) const;  // view with params()[i].shape
  // Deterministic: N(0, init_std) for matrices and embeddings, 1 for norms, 0 for biases. Each
  // tensor draws from its own stream keyed by (seed, its name), so the result depends on nothing
  // but the seed, the name and the shape (not on thread counts or backends). Then sync_compute().
  void init_random(uint64_t seed, float init_std);
  // Refreshes the compute copy from master (a no-op when they are the same buffer). Call after
  // every optimizer step and after loading weights.
  void sync_compute();
  // Frees the f32 master when it is a buffer apart from compute (a bf16 backend); a no-op when
  // compute IS master. Afterwards master(), master_flat() and sync_compute() abort.
  void release_master();

  // ---- compute weights ----
  const Tensor& compute_flat() const { return compute_; }
  Tensor compute(size_t i) const;
  const Tensor& embed_tokens() const { return embed_; }
  const Tensor& final_norm() const { return final_norm_; }
  const Tensor& lm_head() const { return lm_head_; }  // the embedding table when tied
  const LayerWeights& layer(int64_t i) const { return layers_[i]; }

  // ---- gradients (f32) ----
  bool has_grads() const { return grad_.defined(); }
  const Tensor& grad_flat() const;  // aborts when released
  Tensor grad(size_t i) const;
  void zero_grads();
  // Frees the grad buffer (views handed out earlier keep their storage alive: drop them first).
  void release_grads();
  // Allocates a zeroed grad buffer again (no-op when present).
  void restore_grads();
  const Tensor& grad_embed_tokens() const { return grad_embed_; }
  const Tensor& grad_final_norm() const { return grad_final_norm_; }
  const Tensor& grad_lm_head() const { return grad_lm_head_; }  // = grad_embed_tokens when tied
  const LayerGrads& layer_grad(int64_t i) const { return layer_grads_[i]; }

 private:
  Tensor view_of(const Tensor& flat, size_t i) const;
  Tensor view_by_name(const Tensor& flat, const std::string& name) const;
  // Fills the named views of `flat` (embed, norm, head, per-layer) into the given slots.
  void bind(const Tensor& flat, Tensor& embed, Tensor& norm, Tensor& head, std::vector<LayerWeights>& layers) const;

  Backend* backend_;
  ModelConfig config_;
  std::vector<ParamInfo> layout_;
  std::unordered_map<std::string, size_t> by_name_;
  int64_t flat_size_ = 0;
  Tensor master_, compute_, grad_;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  Tensor grad_embed_, grad_final_norm_, grad_lm_head_;
  std::vector<LayerGrads> layer_grads_;
};

}  // namespace rlrun::engine
