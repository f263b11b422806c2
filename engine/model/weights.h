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
//   compute  the weights ops read. On an f32 backend it IS master (same storage); on a bf16
//            backend it is a compute_dtype (P) copy refreshed by sync_compute(). A trainer whose
//            distributed optimizer keeps the master of its own shard (trainer/optimizer.h)
//            releases this full master: release_master().
//   grad     f32 (P)  accumulated by backward; can be released (freed) and restored (zeroed),
//            for `weight_broadcast_free_grad_buffers`.
//
// Storage of the weight MATRICES (projections, embeddings, LM head; WeightStorage below). Norms'
// gains and biases are tiny and stay f32 whatever it says.
//   kF32         as above.
//   kBf16Frozen  the matrices live in bf16 ONLY, at their flat offsets of a bf16 (P) buffer; the
//                norms and biases in a small f32 buffer of their own. No f32 master and no
//                gradients: for weights that never train (a LoRA base, a rollout worker's copy,
//                which changes only by weight sync: write_flat()). Half the bytes of kF32 (a
//                quarter of kF32 with its grad buffer). A backend whose compute dtype is f32
//                multiplies bf16 matrices by f32 activations with fp32 sums (backend.h: matmul).
//   kBf16Cache   kF32's f32 master and grad, plus a bf16 (P) copy of the matrices that the products
//                read: compute_dtype: bf16 on a CPU, whose other ops compute in f32, without
//                rounding the weights at every product. compute(i) is the bf16 copy for a matrix
//                and the master for a norm or bias; embed_tokens() is the master (rows are
//                gathered, not multiplied; a tied lm_head() is the bf16 copy); sync_compute() refreshes the copy from the
//                master, so call it after every write of the master (the trainer does after each
//                optimizer step, checkpoint load and reference copy: TrainableModel::
//                weights_written). 2 bytes per parameter more than kF32.
//
// Ownership: a ModelWeights owns its buffers; the Backend must outlive it. Per-tensor views share
// the flat storage, so writing a view writes the flat buffer. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
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

enum class WeightStorage { kF32, kBf16Frozen, kBf16Cache };

// Compute views of one decoder layer's weights (bf16 matrices with kBf16Frozen) (biases undefined unless qkv_bias; q_norm,
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
  // Allocates zeroed buffers on `backend` (which must outlive this): master, compute and grad
  // (kF32), or the bf16 matrices and f32 norms (kBf16Frozen; the caller checks the backend
  // computes in f32: Model::create).
  ModelWeights(Backend& backend, const ModelConfig& config, WeightStorage storage = WeightStorage::kF32);
  ModelWeights(const ModelWeights&) = delete;  // a copy would share (not copy) the buffers
  ModelWeights& operator=(const ModelWeights&) = delete;

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  const std::vector<ParamInfo>& params() const { return layout_; }
  int64_t flat_size() const { return flat_size_; }
  // Index of the parameter called `name`, or not_found naming it.
  Result<size_t> index_of(std::string_view name) const;
  WeightStorage storage() const { return storage_; }
  // Bytes of every buffer this holds now (master, compute, norms, grad; each counted once).
  int64_t bytes() const;

  // ---- writing weights (any storage) ----
  // Parameter i = `values` (params()[i].numel f32 from the host): into the master when there is
  // one (then call sync_compute()), else rounded into its compute storage.
  void write(size_t i, std::span<const float> values);
  // Elements [begin, begin + values.numel()) of the flat layout = `values` (f32 on this backend),
  // the same way: a weight sync's bucket (engine/comm/weight_receiver.h).
  void write_flat(int64_t begin, const Tensor& values);
  // The compute weights of `other` (same config and storage, same backend): a frozen copy.
  void copy_compute_from(const ModelWeights& other);

  // ---- master weights (f32) ----
  // False after release_master() and with kBf16Frozen: then compute(i) holds the only copy.
  bool has_master() const { return master_.defined(); }
  const Tensor& master_flat() const;  // aborts when released
  Tensor master(size_t i) const;  // view with params()[i].shape
  // Deterministic: N(0, init_std) for matrices and embeddings, 1 for norms, 0 for biases. Each
  // tensor draws from its own stream keyed by (seed, its name), so the result depends on nothing
  // but the seed, the name and the shape (not on thread counts or backends). Then sync_compute().
  void init_random(uint64_t seed, float init_std);
  // Refreshes the compute copy from master (a no-op when they are the same buffer, or when there
  // is no master). Call after every optimizer step and after loading weights.
  void sync_compute();
  // Frees the f32 master when it is a buffer apart from compute (a bf16 backend); a no-op when
  // compute IS master, and with kBf16Cache (the norms are read from it). Afterwards master(),
  // master_flat() and sync_compute() abort.
  void release_master();

  // ---- compute weights ----
  // The whole compute buffer (P) where it holds every parameter (kF32); aborts with kBf16Frozen
  // and kBf16Cache, whose norms live apart: use compute(i), copy_compute_from.
  const Tensor& compute_flat() const;
  Tensor compute(size_t i) const;  // bf16 for a matrix with kBf16Frozen and kBf16Cache
  const Tensor& embed_tokens() const { return embed_; }
  const Tensor& final_norm() const { return final_norm_; }
  const Tensor& lm_head() const { return lm_head_; }  // the embedding table when tied
  const LayerWeights& layer(int64_t i) const { return layers_[i]; }

  // ---- gradients (f32; never with kBf16Frozen) ----
  bool has_grads() const { return grad_.defined(); }
  const Tensor& grad_flat() const;  // aborts when released
  Tensor grad(size_t i) const;
  void zero_grads();
  // Frees the grad buffer (views handed out earlier keep their storage alive: drop them first).
  void release_grads();
  // Allocates a zeroed grad buffer again (no-op when present; aborts with kBf16Frozen).
  void restore_grads();
  const Tensor& grad_embed_tokens() const { return grad_embed_; }
  const Tensor& grad_final_norm() const { return grad_final_norm_; }
  const Tensor& grad_lm_head() const { return grad_lm_head_; }  // = grad_embed_tokens when tied
  const LayerGrads& layer_grad(int64_t i) const { return layer_grads_[i]; }

 private:
  Tensor view_of(const Tensor& flat, size_t i) const;
  // The flat (numel) view of parameter i's compute storage.
  Tensor compute_slot(size_t i) const;
  bool is_matrix(size_t i) const { return !layout_[i].is_norm && !layout_[i].is_bias; }
  // Fills the named views `view(i)` (embed, norm, head, per-layer) into the given slots.
  void bind(const std::function<Tensor(size_t)>& view, Tensor& embed, Tensor& norm, Tensor& head,
            std::vector<LayerWeights>& layers) const;

  Backend* backend_;
  WeightStorage storage_ = WeightStorage::kF32;
  ModelConfig config_;
  std::vector<ParamInfo> layout_;
  std::unordered_map<std::string, size_t> by_name_;
  int64_t flat_size_ = 0;
  Tensor master_, compute_, grad_;
  Tensor small_;                      // kBf16Frozen: the norms and biases, f32
  std::vector<int64_t> small_offset_;  // kBf16Frozen: parameter i's offset in small_ (-1: a matrix)
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  Tensor grad_embed_, grad_final_norm_, grad_lm_head_;
  std::vector<LayerGrads> layer_grads_;
};

}  // namespace rlrun::engine
