// engine_loop.h - one thread drives a Scheduler for requests that arrive from other threads
// (`rlrun serve`'s HTTP threads): the Generator of a stand-alone server.
//
// The thread loops: take the submitted requests and cancels (Scheduler::add / cancel), run one
// Scheduler::step() when something can step, hand the streamed tokens and finished samples to
// their sinks; with nothing to step it sleeps until a submit. Requests submitted while a step runs
// join the batch at the next step: concurrent requests are batched by the scheduler's continuous
// batching, never served one at a time.
//
// Threads: submit/cancel/stats from any thread. The Scheduler (and its Model) is used only by the
// loop's thread and must outlive the EngineLoop.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rollout/generator.h"
#include "rollout/scheduler.h"

namespace rlrun::rollout {

struct EngineLoopOptions {
  int64_t max_requests = 4096;  // submitted and unfinished requests; more get resource_exhausted
};

// What the loop has done so far (a snapshot).
struct EngineLoopStats {
  int64_t requests = 0;        // submitted, lifetime
  int64_t unfinished = 0;      // submitted and not yet finished
  SchedulerStats scheduler;    // as of the last step
};

class EngineLoop : public Generator {
 public:
  // Starts the thread.
  EngineLoop(Scheduler& scheduler, const EngineLoopOptions& options);
  ~EngineLoop() override;  // stop()

  Status submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) override;
  void cancel(uint64_t request_id) override;
  // Refuses new requests, cancels the unfinished ones (their sinks get kCancelled outputs) and
  // joins the thread. Idempotent.
  void stop();
  EngineLoopStats stats() const;

 private:
  struct Submitted {
    GenerationRequest request;
    std::shared_ptr<GenerationSink> sink;
  };
  void run();
  // Takes what other threads queued; false when stopping. Waits while nothing can step.
  bool take_inbox(std::vector<Submitted>* submitted, std::vector<uint64_t>* cancels);
  void deliver();

  Scheduler& scheduler_;
  const EngineLoopOptions options_;

  mutable std::mutex mu_;  // guards the members below it
  std::condition_variable wake_;
  std::vector<Submitted> inbox_;
  std::vector<uint64_t> cancels_;
  bool stopping_ = false;
  EngineLoopStats stats_;

  // Loop thread only: the sink of each unfinished request, and its samples still to finish.
  std::unordered_map<uint64_t, std::pair<std::shared_ptr<GenerationSink>, uint32_t>> active_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace rlrun::rollout
