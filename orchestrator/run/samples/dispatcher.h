// dispatcher.h - where every sample of the run is, from its prompt's admission to its batch
// (design "A sample's life", steps 2-5), without the messages' transport.
//
// A prompt the orchestrator admits becomes a Group of group_size samples; sample `index` of group
// `g` has the id g * group_size + index everywhere (ledger, metrics.jsonl). Rules:
//  - Work goes to the ready rollout worker (WorkerSlot::serves) with the most free lanes
//    (lanes_per_worker requests each). Without individual lanes a group is one request of all its
//    samples, sent when admitted; with them every sample is its own request, queued until a lane
//    is free (send_pending).
//  - A result is routed by its request id. A result for a request the Dispatcher does not hold
//    (a dead worker's late answer, garbage) is ignored, as is a second result for a sample. A
//    request frees its lane when all its samples are back.
//  - A group leaves the in-flight set when its last sample is back (complete()); the orchestrator
//    scores it and queues it (push_scored) until take_batch() takes it.
//  - A dead worker's requests go back (requeue_worker): its samples not yet back are sent again one
//    per request, before any new group, keeping their group and sample ids (the ledger sees each
//    id dispatched once). Evaluation problems (greedy, one request each) go back the same way.
//  - Requests of groups the orchestrator judges too far off-policy are cancelled once
//    (take_off_policy); their cancelled samples come back as results.
// What leaves goes through `send` (the orchestrator: the ControlServer; tests: a recorder).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/protocol.h"
#include "common/status.h"
#include "orchestrator/env/episode_record.h"
#include "orchestrator/run/workers/worker_slot.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

struct DispatchOptions {
  uint32_t group_size = 1;
  bool individual_lanes = false;  // enable_individual_sample_lanes
  int lanes_per_worker = 1;       // max_concurrent_prompts_per_server
  float temperature = 1.0f, top_p = 1.0f;
  uint32_t max_tokens = 1;
  uint64_t seed = 0;              // a request's seed is derived from it and the request id
  float eval_temperature = 0.0f;  // held-out evaluation: 0 = greedy; else seeded by seed and problem
  std::vector<int32_t> stop_ids;
};

class Dispatcher {
 public:
  using Clock = std::chrono::steady_clock;
  struct Sample {
    std::vector<int32_t> completion;
    std::vector<float> logprobs;
    // The KL reference's, per completion token, as a rollout worker scored them (run/samples/reference_scoring.h);
    // empty: the trainer scores the sample.
    std::vector<float> ref_logprobs;
    uint64_t version = 0;  // oldest weight version that sampled a token
    std::string text;      // the completion decoded (for the reward server)
    double reward = 0;
    float advantage = 0;
    bool returned = false;
    double worker_seconds = 0;  // request received -> sample done, as the worker timed it
    // An episode's sample (orchestrator/env/): its training sequences, each with its own prompt
    // and the environment's tokens masked; `completion` then holds all their completions.
    std::vector<EpisodeSegment> segments;
  };
  struct Group {
    uint64_t id = 0;
    Problem problem;
    std::vector<int32_t> prompt_ids;
    uint64_t dispatch_version = 0;
    std::vector<Sample> samples;
    int returned = 0;
    bool failed = false;  // a sample was cancelled or failed: no advantages for the group
    int rewards_waiting = 0;  // samples the reward server has not scored yet
    std::chrono::steady_clock::time_point admitted_at{};  // when its request was sent
    bool episodes = false;  // its samples are episodes an environment runs (no requests here)
  };
  // Sends `request` to workers[worker]; an error is logged and the request counts as in flight
  // (it times out on that worker).
  using Send = std::function<Status(int worker, const GenerateRequest& request)>;

  // `workers` must outlive the Dispatcher; it reads their state, never changes it.
  Dispatcher(DispatchOptions options, const std::vector<WorkerSlot>& workers, Send send);

  uint64_t sample_id(uint64_t group, uint32_t index) const { return group * options_.group_size + index; }
  uint32_t group_size() const { return options_.group_size; }

  // ---- placing work
  int free_worker() const;  // index of the serving worker with most free lanes, or -1
  int least_busy_worker() const;  // the serving worker with the fewest requests in flight (lanes free or not), or -1
  int lanes_used(int worker) const { return lanes_used_[worker]; }
  bool has_pending() const { return !pending_.empty(); }
  // Admits a group for `prompt_ids` at weight version `version` and returns its id. Without
  // individual lanes its request goes to free_worker(), which the caller checked is >= 0.
  uint64_t admit(Problem problem, std::vector<int32_t> prompt_ids, uint64_t version);
  // Admits a group whose samples are episodes (orchestrator/env/): no request is sent; each
  // sample comes back through episode_returned().
  uint64_t admit_episodes(Problem problem, uint64_t version);
  // Marks sample `index` of episode group `group` returned; nullptr when the group is not in flight
  // or the sample came back already.
  Group* episode_returned(uint64_t group, uint32_t index);
  bool send_pending();   // one queued sample to a free lane; false when none is queued or free
  void send_requeued();  // a dead worker's work, while lanes are free
  // One greedy request for evaluation problem `problem`, answered by weights >= min_version.
  Status send_eval(uint64_t problem, std::vector<int32_t> prompt_ids, uint64_t min_version, int worker);
  // Queues an evaluation problem; send_requeued() sends it (send_eval) to the serving worker with
  // the fewest in flight, below kEvalWindow each: an evaluation set of any size never floods a
  // worker's control queue, and needs no free lane.
  void queue_eval(uint64_t problem, std::vector<int32_t> prompt_ids, uint64_t min_version);
  static constexpr int kEvalWindow = 1024;  // evaluation requests in flight per worker
  // Requests of training groups dispatched at a version `off_policy` rejects, not cancelled
  // before, by worker: each is marked cancelled and returned once.
  std::map<int, std::vector<uint64_t>> take_off_policy(const std::function<bool(uint64_t version)>& off_policy);

  // ---- results
  struct Routed {
    enum class Kind { kIgnored, kEval, kSample } kind = Kind::kIgnored;
    uint64_t problem = 0;     // kEval: the evaluation problem (kSample: the group id)
    Group* group = nullptr;   // kSample: its group (valid until complete() or the next admit)
    uint32_t index = 0;       // kSample: the sample, marked returned
  };
  Routed route(const GenerateResult& result);
  bool is_complete(const Group& group) const { return group.returned == static_cast<int>(options_.group_size); }
  Group complete(uint64_t group);  // takes a complete group out of the in-flight set

  // ---- scored groups and batches
  void push_scored(Group group) { scored_.push_back(std::move(group)); }
  // Takes `want` scored groups in order. Groups `stale` rejects are dropped into `dropped` (the
  // caller accounts for them). With too few left, nothing is taken and the order is kept.
  std::optional<std::vector<Group>> take_batch(size_t want, const std::function<bool(const Group&)>& stale,
                                               std::vector<Group>& dropped);

  // ---- failures and timeouts
  // Every request of `worker` goes back; returns the samples (and evaluation problems) requeued.
  int64_t requeue_worker(int worker);
  struct Overdue {
    uint64_t request = 0;
    int worker = 0;
    double age_seconds = 0;
  };
  // The first request older than `limit_seconds` whose worker `exempt` does not excuse.
  std::optional<Overdue> overdue(double limit_seconds, const std::function<bool(int worker)>& exempt) const;

  // ---- what is where
  int64_t groups_outstanding() const { return static_cast<int64_t>(in_flight_.size() + scored_.size()); }
  const std::map<uint64_t, Group>& in_flight() const { return in_flight_; }
  const std::deque<Group>& scored() const { return scored_; }
  std::deque<Group> take_scored() { return std::exchange(scored_, {}); }
  // Ids continue across a resume: the next group and request ids.
  std::pair<uint64_t, uint64_t> next_ids() const { return {next_group_, next_request_}; }
  void restore_next_ids(uint64_t group, uint64_t request) { next_group_ = group, next_request_ = request; }

 private:
  struct Request {
    uint64_t group = 0;  // eval: index into the eval set
    uint32_t first = 0, count = 0, returned = 0;
    int worker = 0;
    uint64_t dispatch_version = 0;
    bool eval = false;
    bool cancel_sent = false;
    Clock::time_point sent_at = Clock::now();
    std::vector<int32_t> eval_prompt;  // eval: sent again as is when its worker dies
  };
  struct EvalWork {
    uint64_t problem = 0;
    std::vector<int32_t> prompt_ids;
    uint64_t min_version = 0;
  };
  void send_samples(uint64_t group, uint32_t first, uint32_t count, int worker);
  int free_eval_worker() const;  // -1: none serves with room in its evaluation window

  DispatchOptions options_;
  const std::vector<WorkerSlot>& workers_;
  Send send_;
  std::vector<int> lanes_used_;  // by worker: requests in flight
  std::vector<int> eval_in_flight_;  // by worker: of which evaluation requests
  std::map<uint64_t, Group> in_flight_;
  std::deque<Group> scored_;
  std::map<uint64_t, Request> requests_;
  std::deque<std::pair<uint64_t, uint32_t>> pending_;   // individual lanes: (group, index)
  std::deque<std::pair<uint64_t, uint32_t>> requeued_;  // a dead worker's samples
  std::deque<EvalWork> requeued_eval_;                   // a dead worker's evaluation problems
  uint64_t next_group_ = 0, next_request_ = 1;
};

}  // namespace rlrun::orchestrator
