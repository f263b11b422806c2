// weight_update.h - a rollout worker loads a new weight version (design step 8) into the model
// it generates with, between decode steps.
//
// The bytes arrive over the weight-sync Communicator from trainer rank 0 in buckets
// (engine/comm/weight_sync.h, received by engine/comm/weight_receiver.h straight into the model's flat
// master buffer), then the compute copy is refreshed. Memory: one bucket beyond the weights (two
// on a bf16 backend, where sync_compute() converts in place into the existing compute buffer).
// bf16-frozen weights (base_weights_dtype: bf16: no f32 master) take each f32 bucket rounded into
// their bf16 matrices, the norms and biases as they are (ModelWeights::write_flat): two buckets.
// With low-rank adapters attached to the model (Model::attach_lora: a LoRA run) only the adapters
// arrive, into their own flat buffer, and the model computes them beside its frozen base weights:
// nothing is merged, so no copy of the base is kept.
// Threads: the thread driving the model; the caller makes sure no step runs meanwhile.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/comm/communicator.h"
#include "engine/comm/weight_receiver.h"
#include "engine/comm/weight_sync.h"
#include "engine/model/model.h"

namespace rlrun::rollout {

class WeightUpdater {
 public:
  // model and comm must outlive the updater; this process is a receiver (rank > 0) of comm.
  WeightUpdater(engine::Model& model, engine::Communicator& comm, int64_t max_bucket_bytes = int64_t{1} << 32);

  // Receives one sync (blocking until it ends) into the model. On error the model may hold a mix
  // of versions: the caller must not report the new version (and should retry the sync).
  Result<engine::WeightReceiveReport> receive();

 private:
  engine::Model& model_;
  engine::WeightReceiver receiver_;
};

}  // namespace rlrun::rollout
