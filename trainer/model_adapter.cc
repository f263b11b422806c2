#include "trainer/model_adapter.h"

#include "common/observe/log.h"
#include "engine/comm/weight_sync.h"

namespace rlrun::trainer {

ModelAdapter::ModelAdapter(engine::Model& model) : model_(model), specs_(engine::flat_layout_of(model.weights()).tensors) {}

Result<ModelForward> forward_micro_batch(engine::Model& model, const MicroBatch& batch, bool for_backward) {
  if (batch.targets.size() != batch.input_ids.size()) {
    return invalid_argument(str("micro-batch: ", batch.targets.size(), " targets for ", batch.input_ids.size(), " tokens"));
  }
  engine::PackedBatch packed{batch.input_ids, batch.position_ids, batch.cu_seqlens, batch.targets, batch.prefix_of};
  RLRUN_ASSIGN_OR_RETURN(engine::ForwardOutput out, model.forward(packed, for_backward));
  return ModelForward{out.logprobs, out.entropy};
}

Result<ModelForward> ModelAdapter::forward(const MicroBatch& batch, bool for_backward) {
  return forward_micro_batch(model_, batch, for_backward);
}

}  // namespace rlrun::trainer
