#include "trainer/lora_adapter.h"

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/comm/weight_sync.h"

namespace rlrun::trainer {

Result<std::unique_ptr<LoraModelAdapter>> LoraModelAdapter::create(engine::Model& model, engine::LoraWeights& lora) {
  RLRUN_RETURN_IF_ERROR(model.attach_lora(&lora));
  model.weights().release_grads();  // the base is frozen
  return std::unique_ptr<LoraModelAdapter>(new LoraModelAdapter(model, lora));
}

LoraModelAdapter::LoraModelAdapter(engine::Model& model, engine::LoraWeights& lora)
    : model_(model), lora_(lora), specs_(engine::flat_layout_of(lora).tensors) {}

Result<ModelForward> LoraModelAdapter::forward(const MicroBatch& batch, bool for_backward) {
  return forward_micro_batch(model_, batch, for_backward);
}

Result<std::unique_ptr<LoraReference>> LoraReference::create(engine::Model& model, engine::LoraWeights& policy) {
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<engine::LoraWeights> adapters,
                         engine::LoraWeights::create(policy.backend(), model.config(), policy.config()));
  adapters->release_grads();
  policy.backend().copy(adapters->master_flat(), policy.master_flat());
  return std::unique_ptr<LoraReference>(new LoraReference(model, policy, std::move(adapters)));
}

LoraReference::LoraReference(engine::Model& model, engine::LoraWeights& policy,
                             std::unique_ptr<engine::LoraWeights> adapters)
    : model_(model), policy_(policy), adapters_(std::move(adapters)), specs_(engine::flat_layout_of(*adapters_).tensors) {}

const engine::Tensor& LoraReference::grads_flat() {
  RLRUN_CHECK(false, "LoraReference: the KL reference has no gradients");
  return adapters_->master_flat();
}

void LoraReference::backward(const engine::Tensor&, const engine::Tensor&) {
  RLRUN_CHECK(false, "LoraReference: the KL reference is scored, never trained");
}

Result<ModelForward> LoraReference::forward(const MicroBatch& batch, bool for_backward) {
  RLRUN_CHECK(!for_backward, "LoraReference: forward for backward");
  RLRUN_CHECK(model_.attach_lora(adapters_.get()).ok(), "LoraReference: adapters made for this model");
  Result<ModelForward> out = forward_micro_batch(model_, batch, false);
  RLRUN_CHECK(model_.attach_lora(&policy_).ok(), "LoraReference: the policy's adapters");
  return out;
}

}  // namespace rlrun::trainer
