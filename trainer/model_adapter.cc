#include "trainer/model_adapter.h"

#include "common/log.h"

namespace rlrun::trainer {

std::vector<ParamSpec> param_specs_of(const std::vector<engine::ParamInfo>& params) {
  std::vector<ParamSpec> specs;
  specs.reserve(params.size());
  for (const engine::ParamInfo& p : params) {
    ParamSpec s;
    s.name = p.name;
    s.shape.assign(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    s.offset = p.offset;
    s.numel = p.numel;
    specs.push_back(std::move(s));
  }
  return specs;
}

ModelAdapter::ModelAdapter(engine::Model& model) : model_(model), specs_(param_specs_of(model.weights().params())) {}

Result<ModelForward> ModelAdapter::forward(const MicroBatch& batch, bool for_backward) {
  if (batch.targets.size() != batch.input_ids.size()) {
    return invalid_argument(str("micro-batch: ", batch.targets.size(), " targets for ", batch.input_ids.size(), " tokens"));
  }
  engine::PackedBatch packed{batch.input_ids, batch.position_ids, batch.cu_seqlens, batch.targets};
  RLRUN_ASSIGN_OR_RETURN(engine::ForwardOutput out, model_.forward(packed, for_backward));
  return ModelForward{out.logprobs, out.entropy};
}

}  // namespace rlrun::trainer
