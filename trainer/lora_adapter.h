// lora_adapter.h - the Llama decoder with low-rank adapters (engine/model/lora.h) as the trainer's
// TrainableModel: its flat parameters ARE the adapters' flat buffer.
//
// So the optimizer's AdamW moments (and ZeRO-1 shards), checkpoints and --resume, the gradient
// all-reduce between data-parallel ranks, and weight sync all carry only the adapters; the base
// weights are frozen on the model, which holds no gradient buffer for them.
//
// LoraReference is the KL reference over the same Model: the adapters' values when the trainer
// captures its reference (B = 0 before any update: the base model), attached for its forward
// only. Its "weights" are that adapter copy, so no second copy of the base weights exists.
//
// Ownership: both borrow the Model and the LoraWeights, which must outlive them. One thread
// drives them (and the model) at a time; a reference forward may not come between a policy
// forward(for_backward = true) and its backward.
#pragma once

#include <memory>
#include <vector>

#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "trainer/model_adapter.h"
#include "trainer/trainable_model.h"

namespace rlrun::trainer {

class LoraModelAdapter : public TrainableModel {
 public:
  // Attaches `lora` to `model` and frees the model's base gradient buffer. invalid_argument when
  // the model cannot take the adapters (Model::attach_lora).
  static Result<std::unique_ptr<LoraModelAdapter>> create(engine::Model& model, engine::LoraWeights& lora);

  engine::Model& model() { return model_; }
  engine::LoraWeights& lora() { return lora_; }
  engine::Backend& backend() override { return model_.backend(); }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t flat_size() const override { return lora_.flat_size(); }
  const engine::Tensor& params_flat() override { return lora_.master_flat(); }
  const engine::Tensor& weights_flat() override { return lora_.master_flat(); }  // f32 compute
  void release_master() override {}  // the master is the compute copy
  bool has_grads() const override { return lora_.has_grads(); }
  const engine::Tensor& grads_flat() override { return lora_.grad_flat(); }
  void zero_grads() override { lora_.zero_grads(); }
  void release_grads() override { lora_.release_grads(); }
  void restore_grads() override { lora_.restore_grads(); }
  Result<ModelForward> forward(const MicroBatch& batch, bool for_backward) override;
  bool shares_prefixes() const override { return true; }
  void backward(const engine::Tensor& dlogprob, const engine::Tensor& dentropy) override {
    model_.backward(dlogprob, dentropy);
  }

 private:
  LoraModelAdapter(engine::Model& model, engine::LoraWeights& lora);
  engine::Model& model_;
  engine::LoraWeights& lora_;
  std::vector<ParamSpec> specs_;
};

class LoraReference : public TrainableModel {
 public:
  // The policy's model and adapters; the reference's adapters start as a copy of the policy's.
  static Result<std::unique_ptr<LoraReference>> create(engine::Model& model, engine::LoraWeights& policy);

  engine::Backend& backend() override { return model_.backend(); }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t flat_size() const override { return adapters_->flat_size(); }
  const engine::Tensor& params_flat() override { return adapters_->master_flat(); }
  const engine::Tensor& weights_flat() override { return adapters_->master_flat(); }
  void release_master() override {}
  bool has_grads() const override { return false; }
  const engine::Tensor& grads_flat() override;  // aborts: the reference has no gradients
  void zero_grads() override {}
  void release_grads() override {}
  void restore_grads() override {}
  // The model with the reference's adapters in place of the policy's (restored afterwards).
  Result<ModelForward> forward(const MicroBatch& batch, bool for_backward) override;
  bool shares_prefixes() const override { return true; }
  void backward(const engine::Tensor&, const engine::Tensor&) override;  // aborts

 private:
  LoraReference(engine::Model& model, engine::LoraWeights& policy, std::unique_ptr<engine::LoraWeights> adapters);
  engine::Model& model_;
  engine::LoraWeights& policy_;
  std::unique_ptr<engine::LoraWeights> adapters_;
  std::vector<ParamSpec> specs_;
};

}  // namespace rlrun::trainer
