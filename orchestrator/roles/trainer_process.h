// trainer_process.h - the `rlrun trainer` process: one trainer rank serving the orchestrator.
//
// Life: build the backend and the model (from model.checkpoint, or random init with `seed` and
// model.init_std), join the "dp" group (trainer ranks, when there are several) and, on rank 0,
// the "weights-0" group (rank 0 + every rollout worker) through the orchestrator's rendezvous
// store, then Register (role trainer) and serve until Shutdown. A restarted rank (the orchestrator
// restarts the whole group after a failure) loads --resume-from, joins "dp-<n>" and joins the
// weight group at its first sync:
//   TrainBatch      -> trainer::Trainer::train over this rank's micro-batches -> TrainResult
//                      (same correlation id), or ErrorReply naming what failed;
//   WeightSyncBegin -> rank 0 sends the weights as that version over the weight group ->
//                      WeightSyncEnd (other ranks answer at once: they hold no group);
//   SaveCheckpoint  -> every rank saves collectively under <run_dir>/checkpoints/ (rank 0 writes,
//                      trainer/checkpoint.h) -> CheckpointSaved;
//   Heartbeat       -> the orchestrator's echo: proof it lives;
//   Shutdown        -> exit 0.
// A Heartbeat goes out every heartbeat_interval_seconds while idle. When the orchestrator has
// been silent for heartbeat_timeout_seconds while this rank waits for work, it exits 1 (the
// local launcher's PDEATHSIG covers an orchestrator that died outright).
#pragma once

#include <string>

#include "common/config/config.h"
#include "common/protocol/control_plane.h"

namespace rlrun::orchestrator {

struct TrainerProcessOptions {
  std::string orchestrator;   // tcp://HOST:PORT of the orchestrator's ControlServer
  int rank = 0;
  std::string timeline_path;  // "" = no timeline
  // Of every connection to the orchestrator (run/workers/control_plane.h), and of the weight group
  // (rank 0: the run's keys make it the CURVE transport, run/workers/rendezvous.h).
  SecurityOptions control_security;
  std::string resume_from;    // a complete checkpoint to load before registering; "" = none
  // A restarted trainer group (run/training/trainer_recovery.cc): the ranks form "dp-<dp_group_epoch>", and
  // rank 0 joins the weight group its first WeightSyncBegin names (weight_group_epoch -1) instead
  // of "weights-0" while it starts.
  int dp_group_epoch = 0;
  int weight_group_epoch = 0;
};

// Returns the process exit code (kExitOk after Shutdown, kExitFailed otherwise).
int run_trainer_process(const Config& config, const TrainerProcessOptions& options);

}  // namespace rlrun::orchestrator
