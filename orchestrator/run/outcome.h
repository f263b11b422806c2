// run/outcome.h - what summary.json reports (run/report.h writes it): the loop's own figures and
// each part's statistics, as Orchestrator::finish() assembles them at the end of the run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/run/run_recorder.h"
#include "orchestrator/run/samples/episode_runner.h"
#include "orchestrator/run/samples/evaluator.h"
#include "orchestrator/run/samples/prompt_admission.h"
#include "orchestrator/run/samples/reward_stage.h"
#include "orchestrator/run/training/checkpoint_keeper.h"
#include "orchestrator/run/training/trainer_group.h"
#include "orchestrator/run/workers/thread_balancer.h"
#include "orchestrator/run/workers/worker_fleet.h"

namespace rlrun::orchestrator {

struct RunOutcome {
  int64_t steps_completed = 0;
  std::vector<double> step_reward_means;  // per completed step
  int64_t tokens_generated = 0, tokens_trained = 0;
  SampleLedger::Summary samples;  // the whole run's, a resumed run's earlier parts included
  double rollout_idle_fraction = 0;  // mean over rollout workers, within the loop
  RunRecorder::Stats loop;           // loop and trainer idle seconds, the simulator's advice
  Evaluator::Stats eval;
  PromptAdmission::Stats prompts;
  RewardStage::Stats rewards;
  EpisodeRunner::Stats episodes;  // reported when its url is set
  WorkerFleet::Stats workers;     // failures, restarts, peak memory (the orchestrator's own too)
  ThreadBalancer::Stats threads;
  TrainerGroup::Stats trainers;
  CheckpointKeeper::Stats checkpoints;
  std::string exit = "ok";
};

}  // namespace rlrun::orchestrator
