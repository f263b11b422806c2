#include "rollout/weight_update.h"

namespace rlrun::rollout {

namespace {

engine::FlatLayout layout_of(const engine::Model& model) {
  return model.lora() != nullptr ? engine::flat_layout_of(*model.lora()) : engine::flat_layout_of(model.weights());
}

}  // namespace

WeightUpdater::WeightUpdater(engine::Model& model, engine::Communicator& comm, int64_t max_bucket_bytes)
    : model_(model), receiver_(model.backend(), layout_of(model), comm, max_bucket_bytes) {}

Result<engine::WeightReceiveReport> WeightUpdater::receive() {
  if (model_.lora() != nullptr) return receiver_.receive(model_.lora()->master_flat());  // read as they are
  engine::ModelWeights& w = model_.weights();
  if (!w.has_master())  // bf16-frozen: each f32 bucket rounded into the matrices, the norms kept f32
    return receiver_.receive([&w](int64_t begin, const engine::Tensor& bucket) { w.write_flat(begin, bucket); });
  RLRUN_ASSIGN_OR_RETURN(engine::WeightReceiveReport report, receiver_.receive(model_.weights().master_flat()));
  model_.weights().sync_compute();
  return report;
}

}  // namespace rlrun::rollout
