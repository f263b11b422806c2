// scheduler.h - continuous batching over a paged KV cache: what vLLM's scheduler does for a
// rollout worker.
//
// A request (one prompt, num_samples samples) becomes num_samples sequences. Each step():
//   1. reserves the KV slot every running sequence needs for its next token; when the pool is
//      short it PREEMPTS the most recently admitted running sequences (their blocks go back to the
//      pool; they return to the front of the waiting queue and are later recomputed from prompt +
//      the tokens generated so far, keeping the tokens and log-probs already sampled);
//   2. admits waiting sequences first come first served while max_num_seqs, the prefill token
//      budget and the free blocks allow (nothing is admitted in a step that preempted). The
//      samples of one request share their prompt's KV: the first is prefilled; each other one,
//      once a sibling holds the prompt in the cache, forks all but the prompt's last token from
//      it (KvCache::fork: full blocks shared, the partial one copied) and computes only that
//      token (and, after a preemption, what it had generated). A sample whose sibling is being
//      prefilled in the same step waits for the next step rather than compute the prompt again;
//   3. runs ONE Model::forward_cached over the batch: one token per running sequence and the whole
//      prompt (+ generated tokens, when recomputing) per admitted one;
//   4. samples a token per sequence (sampler.h; a SampleRng per sample from (seed, sample index),
//      so results do not depend on batching or preemption), appends it with its log-prob and the
//      current weight version, and finishes a sequence on a stop token (kStop; the stop token is
//      kept), on max_tokens or max_model_len (kLength). Finished sequences free their blocks at
//      once and new ones join at the next step, so a long sequence never blocks short ones.
//
// Invariant: a running sequence's cache holds prompt + generated tokens except the last sampled
// one, which is fed at the next step. The KV computed before a weight update is kept (as in
// vLLM-based asynchronous RL); only tokens sampled after it use the new weights.
//
// Errors a caller can cause (an empty or too long prompt, ids outside the vocabulary, bad
// sampling parameters) become error outputs (finish reason kError), never a crash.
// Threads: one thread drives a Scheduler (and the Model it borrows, which must outlive it).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/protocol/protocol.h"
#include "common/status.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "rollout/sampler.h"
#include "rollout/step_cost.h"

namespace rlrun::rollout {

struct SchedulerOptions {
  int64_t max_num_seqs = 64;           // sequences in one batch
  int64_t max_model_len = 512;         // prompt + completion tokens
  int64_t kv_block_size = 16;          // tokens per block
  int64_t kv_num_blocks = 0;           // pool size: kv_blocks_for_budget(); must hold max_model_len
  int64_t max_prefill_tokens = 4096;   // prompt tokens admitted per step (at least one sequence)
  int64_t max_samples_per_request = 65536;
};

// Blocks of kv_block_size tokens that fit in `bytes` of K/V for `model` (compute dtype). With
// bytes <= 0: enough for max_num_seqs sequences of max_model_len.
int64_t kv_blocks_for_budget(const engine::Model& model, const SchedulerOptions& options, int64_t bytes);

// One prompt and how to sample it. Untrusted: Scheduler::add validates it.
struct GenerationRequest {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  uint32_t num_samples = 1;
  uint32_t first_sample_index = 0;     // samples first .. first + num_samples - 1
  SamplingParams sampling;
  int64_t max_tokens = 0;              // 0: until max_model_len
  std::vector<int32_t> stop_token_ids;
  uint64_t seed = 0;
  uint64_t min_weight_version = 0;     // not admitted before this weight version is loaded
  bool stream = false;                 // report each token as sampled (take_streamed)
  uint64_t tag = 0;                    // the front end's own mark (the episode gateway: the session)
};

// One token of a streaming request, as sampled. The sample's SampleOutput still carries every
// token when it finishes.
struct StreamedToken {
  uint64_t request_id = 0;
  uint32_t sample_index = 0;
  int32_t token = -1;
  float logprob = 0;
};

// One finished (or cancelled, or failed) sample.
struct SampleOutput {
  uint64_t request_id = 0;
  uint32_t sample_index = 0;
  std::vector<int32_t> tokens;           // generated tokens (the stop token included)
  std::vector<float> logprobs;           // log-prob of each token (sampler.h says of what)
  std::vector<int64_t> weight_versions;  // weight version each token was sampled under
  FinishReason finish_reason = FinishReason::kStop;
  std::string error;                     // kError only
  uint32_t preemptions = 0;
  double queue_seconds = 0;              // added -> first admitted
  double prefill_seconds = 0;            // steps that (re)computed its prompt
  double decode_seconds = 0;             // steps that decoded it
};

struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t tokens_generated = 0;   // lifetime
  int64_t preemptions = 0;        // lifetime
  int64_t steps = 0;              // lifetime forward passes
  int64_t max_running = 0;        // most sequences in one batch so far
  int64_t prefix_tokens_shared = 0;  // lifetime prompt tokens forked from a sibling, not computed
  int64_t kv_blocks_trimmed = 0;  // lifetime block-table entries freed outside an all-sliding model's window
};

class Scheduler {
 public:
  // invalid_argument when the options are inconsistent (e.g. the pool cannot hold one sequence
  // of max_model_len). Allocates the KV pool.
  static Result<std::unique_ptr<Scheduler>> create(engine::Model& model, const SchedulerOptions& options);
  ~Scheduler();

  // Queues the request's samples, or queues error outputs for a request that cannot be served.
  void add(GenerationRequest request);
  // Ends every unfinished sample of the request: blocks are freed at once and each comes back
  // with kCancelled and what it generated so far. Returns how many samples were cancelled.
  int64_t cancel(uint64_t request_id);
  // One engine step (see above). Errors only for engine failures (the batch is then failed with
  // error outputs and the scheduler stays usable).
  Status step();
  // Outputs finished since the last call, in finishing order.
  std::vector<SampleOutput> take_finished();
  // Tokens of streaming requests sampled since the last call, in sampling order. A sample's
  // tokens come here before its SampleOutput comes from take_finished().
  std::vector<StreamedToken> take_streamed();

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  // Whether some sample of the request is still running or waiting.
  bool is_active(uint64_t request_id) const;
  // Sequences that step() could advance now (waiting ones may be held by min_weight_version).
  bool can_step() const;
  void set_weight_version(uint64_t version) { weight_version_ = version; }
  uint64_t weight_version() const { return weight_version_; }
  SchedulerStats stats() const;
  // What the last step() computed (all zero when it ran nothing).
  const StepShape& last_step() const { return last_step_; }
  const SchedulerOptions& options() const { return options_; }
  engine::Model& model() { return model_; }

 private:
  struct Request;   // the shared, immutable part of a request's samples
  struct Sequence;  // one sample being generated
  using Clock = std::chrono::steady_clock;

  Scheduler(engine::Model& model, const SchedulerOptions& options, std::unique_ptr<engine::KvCache> cache);
  std::string validate(const GenerationRequest& request) const;
  void finish(Sequence& seq, FinishReason reason, std::string error = {});
  // Step phases (scheduler_step.cc).
  void reserve_decode_slots();
  void preempt(size_t running_index);
  std::vector<Sequence*> admit();
  // An admitted sibling whose cache holds the first n tokens of `seq`'s prompt (those its window
  // needs, for a model whose blocks are trimmed: KvCache::can_fork), or nullptr.
  Sequence* prefix_donor(const Sequence& seq, int64_t n) const;
  Status run_batch(const std::vector<Sequence*>& decoding, const std::vector<Sequence*>& prefilling);
  bool append_token(Sequence& seq, SampledToken token);

  engine::Model& model_;
  SchedulerOptions options_;
  std::unique_ptr<engine::KvCache> cache_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;   // preempted ones at the front
  std::vector<SampleOutput> finished_;
  std::vector<StreamedToken> streamed_;
  SamplerScratch scratch_;
  uint64_t weight_version_ = 0;
  engine::SeqId next_seq_id_ = 1;
  uint64_t next_admit_order_ = 1;
  bool preempted_this_step_ = false;
  StepShape last_step_;
  SchedulerStats stats_;
};

}  // namespace rlrun::rollout
