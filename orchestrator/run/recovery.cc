// run/recovery.cc - a trainer rank that dies or hangs restarts the whole trainer group from the
// newest checkpoint, while the rollout workers keep generating. The parts carry out their share
// (TrainerGroup: the kill, back-off, start and registration; WeightSyncDriver: the new epoch;
// StepReplay: what is trained again); this file is the order in which they do it.
//
// Found failed: a rank's process exits (WorkerFleet; its data-parallel peers then fail in their
// collectives and are restarted with it), or a train step, weight send or checkpoint save is not
// answered within train_step_timeout_seconds (the first rank that did not answer is named).
// Every rank restarts, since a gradient group with one new member cannot go on: the survivors are
// killed, and after trainer_restart_backoff_seconds * 2^(restarts - 1) (at most
// restart_backoff_max_seconds) every rank starts again
// (run/workers/supervisor.h: trainer_restart_spec) loading the newest checkpoint this run saved or resumed
// from, or, before the first one, the start weights (model.checkpoint or the initialisation),
// then the format warm-start's batches again: the same version 0. After max_trainer_restarts
// restarts the next failure stops the run, naming the rank's log.
//
// The step counter goes back to the checkpoint's step, and so do the weights: the next weight
// sync (a new epoch of the weight group) gives every rollout worker the checkpoint's version.
// Then the steps after it are trained again from their kept batches (run/training/step_replay.h), in
// order, before any new batch: the same prompts, samples and advantages, so the run continues as
// it would have (on the CPU, exactly). Samples: those of a redone step that had completed were
// counted trained then and are not counted again; those of the step in training when the trainer
// failed are counted when its redo completes; samples in flight or waiting for a batch stay where
// they are and fill the steps after the redone ones, or are discarded `stale` when the redone
// steps carried the trainer past max_async_rollout from their weights. None is lost.
// metrics.jsonl shows it: the step numbers go back, the lines of redone steps carry
// "redone": true, and every line after a restart "trainer_restarts": N.
// The kept batches are bounded (trainer_replay_max_steps): when those after the checkpoint were
// not all kept (checkpoint_every 0 or larger than the bound) the steps since it cannot be trained
// again; the group restarts from the checkpoint (or the start weights) all the same, the log and
// summary.json (steps_lost) say how many steps were lost, and new batches follow. Their samples
// were counted trained once; those of the step in training are counted discarded.
#include <thread>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

Status Orchestrator::blame_dead_worker(const Status& failure) {
  if (trainers_.failed()) return failure;  // a trainer's failure, recover_trainers() acts on it
  // A collective fails on the survivors as soon as one member dies, often before the launcher
  // sees the death: give it a moment, then name the dead worker as the cause (a trainer; a
  // rollout worker's death does not stop the run, supervise() restarts it).
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline) {
    if (Status dead = supervise(); !dead.ok()) {
      log::warn(str("a worker died, and with it: ", failure.message()));
      return dead;  // a trainer: its failure is noted
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failure;
}

Status Orchestrator::recovering(const std::function<Status()>& op) {
  while (true) {
    const Status s = op();
    if (s.ok() || !trainers_.failed()) return s;
    RLRUN_RETURN_IF_ERROR(recover_trainers());
  }
}

Status Orchestrator::recover_trainers() {
  committing_ = false;  // an interrupt stops a restart at once
  trainer_waiting_ = false;
  while (trainers_.failed()) {
    const Status s = restart_trainer_group();  // no other failure is recorded meanwhile
    if (!s.ok() && !trainers_.failed()) return s;
  }
  return Status();
}

Status Orchestrator::restart_trainer_group() {
  ScopedSpan span("trainer_restart", "orchestrator");
  const std::optional<CheckpointKeeper::Ref>& newest = checkpoints_.newest();
  RLRUN_ASSIGN_OR_RETURN(const TrainerGroup::Restart restart,
                         trainers_.begin_restart(newest ? newest->dir : "", newest ? newest->state.steps_completed : 0,
                                                 steps_.completed));
  // The weight group loses its sender: a round in flight fails (its receivers see the sockets
  // close), the next round re-forms the group, and none starts before the restored weights' own.
  sync_.sender_lost();
  const bool looping = recorder_.looping();
  RLRUN_RETURN_IF_ERROR(trainers_.relaunch(restart, looping));
  // Before the first checkpoint: version 0 is the start weights plus the format warm-start.
  if (restart.checkpoint.empty()) {
    const std::vector<BatchBuild>& warm = replay_.warm_start();
    if (!warm.empty())
      log::info(str("no checkpoint yet: the format warm-start's ", warm.size(),
                    " step(s) are trained again to rebuild version 0"));
    for (size_t i = 0; i < warm.size(); ++i)
      RLRUN_RETURN_IF_ERROR(trainers_.train(warm[i], str("format warm-start step ", i + 1, " (redone)"), looping));
  }
  // The step counter and what the summary counts per step go back to the checkpoint's.
  const int64_t from = restart.restored_step, reached = steps_.completed;
  steps_.completed = from;
  steps_.tokens_trained = newest ? newest->state.tokens_trained : 0;
  steps_.reward_means = newest ? newest->state.step_reward_means : std::vector<double>{};
  checkpoints_.rewind();
  metrics_.trainer_step->Set(static_cast<double>(from));
  int64_t redone = 0, lost = 0;
  if (replay_.dropped_through() > from) {
    // The batches since the checkpoint were not all kept: those steps cannot be trained again.
    lost = reached - from;
    log::warn(str("the batches of steps ", from + 1, " to ", replay_.dropped_through(),
                  " were not kept (trainer_replay_max_steps = ", config_.trainer_replay_max_steps, ", ",
                  restart.checkpoint.empty() ? "no checkpoint yet" : str("newest checkpoint of step ", from),
                  "): the trainer group goes on from ", restart.checkpoint.empty() ? "the start weights" : "that checkpoint",
                  " with new batches from step ", from + 1, "; the ", lost,
                  " step(s) trained since are lost (set checkpoint_every to keep them)"));
    for (uint64_t id : replay_.forget_all()) ledger_.discarded(id, "step_not_completed");
  } else {
    redone = replay_.rewind(from);
  }
  RLRUN_RETURN_IF_ERROR(sync_.sync(static_cast<uint64_t>(from), looping));
  sync_.restored();
  trainers_.restored(restart, redone, lost);
  return Status();
}

}  // namespace rlrun::orchestrator
