// generator.h - a generation engine seen from a front end (the OpenAI endpoint): queue a
// GenerationRequest, hear back its tokens as they are sampled and each sample's end.
//
// `rlrun serve` implements it with EngineLoop (engine_loop.h: a thread driving a Scheduler); a
// rollout worker can implement it inside its own loop, so both serve the same endpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "rollout/scheduler.h"

namespace rlrun::rollout {

// Receives the results of the requests submitted with it. Called on the engine's thread, so it
// must not block (store and notify); it may be shared by several requests (one per choice).
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // Tokens of stream requests (GenerationRequest::stream), in sampling order.
  virtual void on_tokens(std::span<const StreamedToken> tokens) = 0;
  // Once per sample, after its last on_tokens; kCancelled or kError outputs included.
  virtual void on_finished(SampleOutput output) = 0;
};

class Generator {
 public:
  virtual ~Generator() = default;
  // Queues `request` (request_id unique among the unfinished ones); `sink` is kept until every
  // sample of it finished. resource_exhausted when the queue is full, unavailable once stopping:
  // nothing is queued then and the sink is never called. Any thread.
  virtual Status submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) = 0;
  // Ends the request's unfinished samples (they finish with kCancelled); a finished or unknown id
  // is ignored. Any thread.
  virtual void cancel(uint64_t request_id) = 0;
};

}  // namespace rlrun::rollout
