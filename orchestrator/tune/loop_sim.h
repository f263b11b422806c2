// tune/loop_sim.h - a discrete-event simulation of the asynchronous loop (design "A sample's
// life"): the staleness gate, the dispatcher's lanes, each rollout worker's continuous batching, the
// trainer's batches and minibatches, the weight sync; on nodes whose processes share CPU cores (or
// own a device each). `rlrun tune` feeds it the costs a run measured (tune/loop_costs.h) and asks
// what other settings would do.
//
// What it models, in the orchestrator's own terms (run/orchestrator.h):
//  - a group is dispatched while floor(outstanding / batch) <= max_async_rollout and a rollout
//    worker has a free lane (the one with the most free lanes); its group_size samples join that
//    worker's queue request_overhead_seconds later (the measured round trip beyond the worker's
//    own time); a lane frees when the group's last sample is back;
//  - a rollout worker runs engine steps back to back while it has sequences: each step admits
//    queued sequences (up to max_num_seqs running, max_prefill_tokens of prompt), computes one token
//    for every running sequence and the prompts of the admitted ones, and costs
//    StepCost::seconds(shape) of work; a sample ends at its completion length, drawn from the
//    measured distribution;
//  - a finished group is scored after reward_seconds and discarded with the measured probability
//    (no reward spread, ...), else queued for a batch;
//  - the trainer waits for prompts_batch_size_for_trainer groups (idle), trains them (each rank its
//    share of the tokens, every optimizer step its fixed cost and, with several ranks, the gradient
//    all-reduce), then the weight sync takes its measured time, each rollout worker pauses to load
//    the weights, and the step is done.
//  - balance_cpu_threads: per window of steps the idle side's cores are lent to the busy side,
//    kept only if the steps got faster (CoreBalance, the orchestrator's own rules).
//  - Work is CPU-seconds of one process at the measured thread count. On a CPU node the busy
//    processes share its cores (processor sharing: each runs at min(1, free cores / demand) of its
//    speed, demand being the threads of the busy processes and the orchestrator's own use); on
//    devices every process runs at full speed.
// Not modelled: KV-cache preemption, evaluations and checkpoints (excluded from the measured step
// time too), prefix sharing, stragglers. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "orchestrator/tune/loop_costs.h"

namespace rlrun::orchestrator::tune {

// The settings `rlrun tune` varies, by their config keys.
struct LoopSettings {
  int64_t inference_num_workers = 1;
  int64_t trainer_num_workers = 1;
  int64_t max_async_rollout = 1;
  int64_t number_of_minibatches = 1;
  int64_t prompts_batch_size_for_trainer = 8;
  int64_t max_concurrent_prompts_per_server = 8;
  int64_t group_size = 8;
  int64_t max_num_seqs = 64;
  int64_t max_prefill_tokens = 4096;
  int64_t cpu_threads_per_worker = 0;  // 0: the node's cores / processes on it (at least 1)
  bool individual_sample_lanes = false;
  // The samples of a group share their prompt: one prefills it, the others fork it and compute
  // its last token (rollout/scheduler.h); the trainer computes it once (share_prompts_in_training).
  bool share_prompts_in_training = true;
  bool kl_reference = false;          // kl_coef > 0: the reference's forward pass over every trained group
  bool reference_on_rollout = false;  // kl_reference_on: rollout (the least busy worker scores each kept group)
  bool reference_stays_on_trainer = false;  // lora_rank > 0: kl_reference_on: rollout is not implemented
  // The orchestrator lends the idle side's cores to the busy one (run/workers/core_balance.h), on one CPU
  // node with cpu_threads_per_worker 0; simulated with the same rules, a trainer with lent threads
  // running at the speed the run measured with them (LoopCosts::trainer_lent_speed; a lend never
  // measured gains nothing and its trial undoes it).
  bool balance_cpu_threads = false;
  // rollout_cpu_nice (backend cpu, max_async_rollout > 0): rollout workers run at this nice, so
  // where busy processes share a node's cores the kernel weighs each thread by 1.25^-nice (CFS)
  // and the trainer's threads get most of a contended core.
  int64_t rollout_cpu_nice = 0;
};

// Where the processes run. Local CPU runs: one node, cores = this machine's.
struct Cluster {
  int64_t nodes = 1;
  int64_t slots_per_node = 1;  // CPU cores (devices = false) or GPUs (devices = true) per node
  bool devices = false;        // one process per device, no sharing
  // Per-process speed relative to the measured run (a faster GPU: > 1).
  double generation_speed = 1.0;
  double training_speed = 1.0;
  // Gradient all-reduce between trainer ranks: bytes per second of the ring. cluster_from() takes
  // a CPU run's from its weight sync; --cluster allreduce_gbps gives another.
  double allreduce_bytes_per_second = 2e9;
};

struct Prediction {
  double seconds_per_step = 0;        // loop time / steps, as metrics.jsonl's wait + train + sync
  double trainer_idle_fraction = 0;   // waiting for a batch
  double rollout_idle_fraction = 0;   // no lane in use, mean over rollout workers
  double groups_generated_per_step = 0;
  double mean_staleness = 0;          // steps between a sample's weights and the step training it
  int64_t trainer_threads = 0;        // per process at the end (balance_cpu_threads may have lent)
  int64_t rollout_threads = 0;
  int64_t steps = 0;
  bool feasible = true;               // false: the settings cannot run (reason says why)
  std::string reason;
};

struct SimOptions {
  int64_t steps = 50;
  uint64_t seed = 1;
};

// The loop with `settings` on `cluster` for options.steps steps, from a cold start as a run begins.
Prediction simulate(const LoopCosts& costs, const LoopSettings& settings, const Cluster& cluster,
                    const SimOptions& options);

// Threads each process gets (cpu_threads_per_worker, or the node's share).
int64_t threads_per_process(const LoopSettings& settings, const Cluster& cluster);

}  // namespace rlrun::orchestrator::tune
