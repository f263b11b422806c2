#include "rollout/weight_update.h"

namespace rlrun::rollout {

WeightUpdater::WeightUpdater(engine::Model& model, engine::Communicator& comm, int64_t max_bucket_bytes)
    : model_(model), receiver_(model.backend(), engine::flat_layout_of(model.weights()), comm, max_bucket_bytes) {}

Result<engine::WeightReceiveReport> WeightUpdater::receive() {
  RLRUN_ASSIGN_OR_RETURN(engine::WeightReceiveReport report, receiver_.receive(model_.weights().master_flat()));
  model_.weights().sync_compute();
  return report;
}

}  // namespace rlrun::rollout
