// model/lora.h - low-rank adapters (LoRA) on a decoder's linear layers, in one flat buffer.
//
// A target projection y = x W^T gains (alpha / r) (x A^T) B^T, with A (r, in) and B (out, r) per
// target module of every layer; W stays frozen. As PEFT does it: A starts random
// (kaiming-uniform, PEFT's default), B at zero, so the adapted model starts as the base model.
//
// Layout (the order of params(), which the optimizer, checkpoints and weight sync iterate): per
// layer i, per target module in the order q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
// down_proj (those targeted), lora_A then lora_B, named as PEFT saves them:
//   base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight   (r, in_features)
//   base_model.model.model.layers.{i}.self_attn.q_proj.lora_B.weight   (out_features, r)
//   ... mlp.gate_proj / up_proj / down_proj ...
// Every tensor starts at a multiple of kParamAlign elements, as in ModelWeights. The flat buffers
// are f32 on every backend: master (what the optimizer updates and forward reads) and grad.
//
// Ownership: a LoraWeights owns its buffers; the Backend must outlive it. Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/tensor.h"

namespace rlrun::engine {

// The seven linear layers of a decoder layer, in layout order.
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kLoraTargets = 7;
// "q_proj", ..., "down_proj": PEFT's target_modules names.
const char* lora_target_name(LoraTarget t);

struct LoraConfig {
  int64_t rank = 0;      // 0: no adapters
  double alpha = 16;     // the adapter's output is scaled by alpha / rank
  std::array<bool, kLoraTargets> targets{true, true, true, true, true, true, true};

  double scale() const { return rank > 0 ? alpha / static_cast<double>(rank) : 0.0; }
  bool targets_any() const;
};

// Parses lora_target_modules ("all" or a comma-separated list of q_proj, ..., down_proj; PEFT's
// "all-linear" too): invalid_argument naming the unknown module and the known ones.
Result<std::array<bool, kLoraTargets>> parse_lora_targets(const std::string& text);

// One target's adapter views (undefined when not targeted).
struct LoraPair {
  Tensor a, b;  // (r, in), (out, r)
};
using LoraLayer = std::array<LoraPair, kLoraTargets>;

class LoraWeights {
 public:
  // Allocates zeroed master and grad buffers for `config`'s targets in a model of `model`'s shape.
  // invalid_argument for rank < 1 or no target.
  static Result<std::unique_ptr<LoraWeights>> create(Backend& backend, const ModelConfig& model,
                                                     const LoraConfig& config);
  LoraWeights(const LoraWeights&) = delete;
  LoraWeights& operator=(const LoraWeights&) = delete;

  const LoraConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  int64_t num_layers() const { return num_layers_; }
  const std::vector<ParamInfo>& params() const { return layout_; }
  int64_t flat_size() const { return flat_size_; }

  // A ~ kaiming-uniform(a = sqrt(5)) as torch.nn.Linear and PEFT draw it (U(-1/sqrt(in),
  // 1/sqrt(in))), from a stream keyed by (seed, name); B = 0.
  void init(uint64_t seed);

  const Tensor& master_flat() const { return master_; }
  const LoraLayer& layer(int64_t i) const { return layers_[i]; }

  bool has_grads() const { return grad_.defined(); }
  const Tensor& grad_flat() const;  // aborts when released
  const LoraLayer& layer_grad(int64_t i) const { return layer_grads_[i]; }
  void zero_grads();
  void release_grads();
  void restore_grads();

 private:
  LoraWeights(Backend& backend, const ModelConfig& model, const LoraConfig& config, std::vector<ParamInfo> layout);
  void bind(const Tensor& flat, std::vector<LoraLayer>& layers) const;

  Backend* backend_;
  LoraConfig config_;
  int64_t num_layers_ = 0;
  std::vector<ParamInfo> layout_;
  int64_t flat_size_ = 0;
  Tensor master_, grad_;
  std::vector<LoraLayer> layers_, layer_grads_;
};

// Calls fn(layer, target, delta) for every adapted projection, delta = scale * B A (out, in): the
// weight change its adapter makes, in a buffer of `lora`'s backend reused from call to call.
void for_each_lora_delta(const LoraWeights& lora,
                         const std::function<void(int64_t layer, LoraTarget target, const Tensor& delta)>& fn);

// weights' f32 master += sign * scale * B A for every adapted projection, then sync_compute():
// the model with the adapters merged in (sign 1), or taken out again (-1, up to rounding). The
// master must be present and both on one backend.
void merge_lora(const LoraWeights& lora, ModelWeights& weights, float sign = 1.0f);

// The adapter layout of `config` on a model of `model`'s shape (PEFT names, shapes, offsets).
std::vector<ParamInfo> lora_layout(const ModelConfig& model, const LoraConfig& config);
// The HF name of the base weight that target `t` of layer `layer` adapts:
// "model.layers.3.self_attn.q_proj.weight".
std::string lora_base_name(int64_t layer, LoraTarget t);

}  // namespace rlrun::engine
