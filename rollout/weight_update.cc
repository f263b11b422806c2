#include "rollout/weight_update.h"

namespace rlrun::rollout {

engine::FlatLayout flat_layout_of(const engine::ModelWeights& weights) {
  engine::FlatLayout layout;
  layout.flat_elements = weights.flat_size();
  layout.dtype = "f32";
  for (const engine::ParamInfo& p : weights.params()) {
    engine::FlatTensor t;
    t.name = p.name;
    t.shape.assign(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    t.offset = p.offset;
    t.numel = p.numel;
    layout.tensors.push_back(std::move(t));
  }
  return layout;
}

WeightUpdater::WeightUpdater(engine::Model& model, engine::Communicator& comm, int64_t max_bucket_bytes)
    : model_(model), receiver_(model.backend(), flat_layout_of(model.weights()), comm, max_bucket_bytes) {}

Result<engine::WeightReceiveReport> WeightUpdater::receive() {
  RLRUN_ASSIGN_OR_RETURN(engine::WeightReceiveReport report, receiver_.receive(model_.weights().master_flat()));
  model_.weights().sync_compute();
  return report;
}

}  // namespace rlrun::rollout
