// sequence.h - the scheduler's private record of one sample (shared by scheduler.cc and
// scheduler_step.cc; nothing outside the scheduler includes it).
#pragma once

#include <memory>

#include "rollout/scheduler.h"

namespace rlrun::rollout {

// What the samples of one request share. Immutable once queued.
struct Scheduler::Request {
  GenerationRequest spec;
  Clock::time_point arrival;
};

struct Scheduler::Sequence {
  Sequence(std::shared_ptr<const Request> r, uint32_t sample_index)
      : request(std::move(r)), rng(request->spec.seed, sample_index) {
    out.request_id = request->spec.request_id;
    out.sample_index = sample_index;
  }

  // Tokens the KV cache must hold to continue: prompt + generated.
  int64_t length() const { return static_cast<int64_t>(request->spec.prompt.size() + out.tokens.size()); }

  std::shared_ptr<const Request> request;
  SampleRng rng;       // advances once per sampled token, so recompute does not change the stream
  SampleOutput out;    // grows as tokens are sampled
  engine::SeqId id = 0;         // KV cache id while admitted (fresh per admission)
  int64_t forked = 0;           // tokens of the prompt taken from a sibling's cache at admission
  bool in_cache = false;
  bool done = false;            // finished; the owner drops it at the end of the phase
  bool scheduled_once = false;  // queue_seconds is measured up to the first admission
  uint64_t admit_order = 0;     // larger = admitted more recently (the preemption victim)
};

}  // namespace rlrun::rollout
