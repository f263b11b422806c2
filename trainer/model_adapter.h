// model_adapter.h - the Llama decoder (engine/model/model.h) as the trainer's TrainableModel.
// The adapter borrows the model: the Model must outlive it.
#pragma once

#include <vector>

#include "engine/model/model.h"
#include "trainer/trainable_model.h"

namespace rlrun::trainer {

// The flat layout of a model's parameters (HF names, shapes, offsets): what weight sync sends
// and every receiver compares with its own.

// A micro-batch through the decoder (ModelAdapter and LoraModelAdapter share it).
Result<ModelForward> forward_micro_batch(engine::Model& model, const MicroBatch& batch, bool for_backward);

class ModelAdapter : public TrainableModel {
 public:
  explicit ModelAdapter(engine::Model& model);

  engine::Model& model() { return model_; }
  engine::Backend& backend() override { return model_.backend(); }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t flat_size() const override { return model_.weights().flat_size(); }
  const engine::Tensor& params_flat() override {
    return model_.weights().has_master() ? model_.weights().master_flat() : released_;
  }
  // With bf16 matrices beside an f32 master (kBf16Cache) the f32 master is what the trainer
  // updates, saves and sends; the bf16 copy follows it (weights_written).
  const engine::Tensor& weights_flat() override {
    return cached() ? model_.weights().master_flat() : model_.weights().compute_flat();
  }
  void release_master() override { model_.weights().release_master(); }
  void weights_written() override {
    if (cached()) model_.weights().sync_compute();
  }
  bool has_grads() const override { return model_.weights().has_grads(); }
  const engine::Tensor& grads_flat() override { return model_.weights().grad_flat(); }
  void zero_grads() override { model_.weights().zero_grads(); }
  void release_grads() override { model_.weights().release_grads(); }
  void restore_grads() override { model_.weights().restore_grads(); }
  Result<ModelForward> forward(const MicroBatch& batch, bool for_backward) override;
  bool shares_prefixes() const override { return model_.backend().compute_dtype() == engine::DType::kF32; }
  void backward(const engine::Tensor& dlogprob, const engine::Tensor& dentropy) override {
    model_.backward(dlogprob, dentropy);
  }

 private:
  bool cached() const { return model_.weights().storage() == engine::WeightStorage::kBf16Cache; }

  engine::Model& model_;
  std::vector<ParamSpec> specs_;
  engine::Tensor released_;  // undefined: params_flat() after release_master()
};

}  // namespace rlrun::trainer
