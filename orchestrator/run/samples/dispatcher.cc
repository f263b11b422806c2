// run/samples/dispatcher.cc - the books of the sample path: groups, requests, lanes, requeued work.
#include "orchestrator/run/samples/dispatcher.h"

#include "common/clock.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {

Dispatcher::Dispatcher(DispatchOptions options, const std::vector<WorkerSlot>& workers, Send send)
    : options_(std::move(options)), workers_(workers), send_(std::move(send)), lanes_used_(workers.size(), 0),
      eval_in_flight_(workers.size(), 0) {}

int Dispatcher::free_worker() const {
  int best = -1, best_free = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i].serves()) continue;
    const int free = options_.lanes_per_worker - lanes_used_[i];
    if (free > best_free) best = static_cast<int>(i), best_free = free;
  }
  return best;
}

int Dispatcher::free_eval_worker() const {
  int best = -1;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i].serves() || eval_in_flight_[i] >= kEvalWindow) continue;
    if (best < 0 || eval_in_flight_[i] < eval_in_flight_[best]) best = static_cast<int>(i);
  }
  return best;
}

void Dispatcher::send_samples(uint64_t group_id, uint32_t first, uint32_t count, int worker) {
  const Group& g = in_flight_.at(group_id);
  GenerateRequest req;
  req.request_id = next_request_++;
  req.prompt_ids = g.prompt_ids;
  req.num_samples = count;
  req.first_sample_index = first;
  req.temperature = options_.temperature;
  req.top_p = options_.top_p;
  req.max_tokens = options_.max_tokens;
  req.stop_token_ids = options_.stop_ids;
  req.seed = options_.seed * 1000003u + req.request_id;
  const Status s = send_(worker, req);
  if (!s.ok()) log::warn(str("dispatch to ", workers_[worker].name, ": ", s.message()));  // counted in flight
  Request r;
  r.group = group_id, r.first = first, r.count = count, r.worker = worker, r.dispatch_version = g.dispatch_version;
  requests_[req.request_id] = std::move(r);
  ++lanes_used_[worker];
}

int Dispatcher::least_busy_worker() const {
  int best = -1;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].serves() && (best < 0 || lanes_used_[i] < lanes_used_[best])) best = static_cast<int>(i);
  }
  return best;
}

uint64_t Dispatcher::admit(Problem problem, std::vector<int32_t> prompt_ids, uint64_t version) {
  Group g;
  g.id = next_group_++;
  g.problem = std::move(problem);
  g.prompt_ids = std::move(prompt_ids);
  g.dispatch_version = version;
  g.samples.resize(options_.group_size);
  g.admitted_at = Clock::now();
  const uint64_t id = g.id;
  in_flight_.emplace(id, std::move(g));
  if (options_.individual_lanes) {
    for (uint32_t i = 0; i < options_.group_size; ++i) pending_.emplace_back(id, i);
  } else {
    send_samples(id, 0, options_.group_size, free_worker());
  }
  return id;
}

uint64_t Dispatcher::admit_episodes(Problem problem, uint64_t version) {
  Group g;
  g.id = next_group_++;
  g.problem = std::move(problem);
  g.dispatch_version = version;
  g.samples.resize(options_.group_size);
  g.admitted_at = Clock::now();
  g.episodes = true;
  const uint64_t id = g.id;
  in_flight_.emplace(id, std::move(g));
  return id;
}

Dispatcher::Group* Dispatcher::episode_returned(uint64_t group, uint32_t index) {
  auto g = in_flight_.find(group);
  if (g == in_flight_.end() || !g->second.episodes || index >= g->second.samples.size() ||
      g->second.samples[index].returned)
    return nullptr;
  g->second.samples[index].returned = true;
  ++g->second.returned;
  return &g->second;
}

bool Dispatcher::send_pending() {
  if (pending_.empty()) return false;
  const int w = free_worker();
  if (w < 0) return false;
  const auto [group, index] = pending_.front();
  pending_.pop_front();
  send_samples(group, index, 1, w);
  return true;
}

Status Dispatcher::send_eval(uint64_t problem, std::vector<int32_t> prompt_ids, uint64_t min_version, int worker) {
  GenerateRequest req;
  req.request_id = next_request_++;
  req.prompt_ids = prompt_ids;
  req.temperature = options_.eval_temperature;  // 0: greedy
  req.seed = options_.seed * 0x9e3779b97f4a7c15ull + problem;  // the same draw for a problem at every evaluation
  req.max_tokens = options_.max_tokens;
  req.stop_token_ids = options_.stop_ids;
  req.min_weight_version = min_version;
  Request r;
  r.group = problem, r.count = 1, r.worker = worker, r.dispatch_version = min_version, r.eval = true;
  r.eval_prompt = std::move(prompt_ids);
  requests_[req.request_id] = std::move(r);
  ++lanes_used_[worker];
  ++eval_in_flight_[worker];
  return send_(worker, req);  // not delivered: the request times out on that worker
}

void Dispatcher::queue_eval(uint64_t problem, std::vector<int32_t> prompt_ids, uint64_t min_version) {
  requeued_eval_.push_back(EvalWork{problem, std::move(prompt_ids), min_version});
}

void Dispatcher::send_requeued() {
  while (!requeued_.empty()) {
    const int w = free_worker();
    if (w < 0) return;
    const auto [group, index] = requeued_.front();
    requeued_.pop_front();
    if (in_flight_.count(group)) send_samples(group, index, 1, w);
  }
  while (!requeued_eval_.empty()) {
    const int w = free_eval_worker();
    if (w < 0) return;
    EvalWork work = std::move(requeued_eval_.front());
    requeued_eval_.pop_front();
    const Status s = send_eval(work.problem, std::move(work.prompt_ids), work.min_version, w);
    if (!s.ok()) log::warn(str("evaluation request to ", workers_[w].name, ": ", s.message()));
  }
}

std::map<int, std::vector<uint64_t>> Dispatcher::take_off_policy(const std::function<bool(uint64_t)>& off_policy) {
  std::map<int, std::vector<uint64_t>> by_worker;
  for (auto& [id, r] : requests_) {
    if (r.eval || r.cancel_sent || !off_policy(r.dispatch_version)) continue;
    r.cancel_sent = true;
    by_worker[r.worker].push_back(id);
  }
  return by_worker;
}

Dispatcher::Routed Dispatcher::route(const GenerateResult& result) {
  auto it = requests_.find(result.request_id);
  if (it == requests_.end() || result.sample_index < it->second.first ||
      result.sample_index >= it->second.first + it->second.count) {
    log::warn(str("ignoring a result for unknown request ", result.request_id, " sample ", result.sample_index));
    return {};
  }
  Request& req = it->second;
  Group* group = nullptr;
  if (!req.eval) {
    auto g = in_flight_.find(req.group);
    // RLRUN invariant: a group lives until all its samples return, so `g` is found.
    if (g == in_flight_.end() || g->second.samples[result.sample_index].returned) return {};  // a repeat
    group = &g->second;
  }
  const Routed routed{req.eval ? Routed::Kind::kEval : Routed::Kind::kSample, req.group, group, result.sample_index};
  if (++req.returned == req.count) {
    --lanes_used_[req.worker];
    if (req.eval) --eval_in_flight_[req.worker];
    requests_.erase(it);
  }
  if (group != nullptr) {
    group->samples[result.sample_index].returned = true;
    ++group->returned;
  }
  return routed;
}

Dispatcher::Group Dispatcher::complete(uint64_t group) {
  auto it = in_flight_.find(group);
  Group g = std::move(it->second);
  in_flight_.erase(it);
  return g;
}

std::optional<std::vector<Dispatcher::Group>> Dispatcher::take_batch(
    size_t want, const std::function<bool(const Group&)>& stale, std::vector<Group>& dropped) {
  std::vector<Group> out;
  while (out.size() < want && !scored_.empty()) {
    Group g = std::move(scored_.front());
    scored_.pop_front();
    if (stale(g)) {
      dropped.push_back(std::move(g));
    } else {
      out.push_back(std::move(g));
    }
  }
  if (out.size() == want) return out;
  for (auto it = out.rbegin(); it != out.rend(); ++it) scored_.push_front(std::move(*it));  // keep order
  return std::nullopt;
}

int64_t Dispatcher::requeue_worker(int worker) {
  int64_t samples = 0;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = it->second;
    if (r.worker != worker) {
      ++it;
      continue;
    }
    if (r.eval) {
      requeued_eval_.push_back(EvalWork{r.group, std::move(r.eval_prompt), r.dispatch_version});
      ++samples;
    } else if (auto g = in_flight_.find(r.group); g != in_flight_.end()) {
      for (uint32_t i = r.first; i < r.first + r.count; ++i) {
        if (g->second.samples[i].returned) continue;
        requeued_.emplace_back(r.group, i);
        ++samples;
      }
    }
    it = requests_.erase(it);
  }
  lanes_used_[worker] = 0;
  eval_in_flight_[worker] = 0;
  return samples;
}

std::optional<Dispatcher::Overdue> Dispatcher::overdue(double limit_seconds,
                                                       const std::function<bool(int)>& exempt) const {
  for (const auto& [id, r] : requests_) {
    const double age = seconds_since(r.sent_at);
    if (age <= limit_seconds || exempt(r.worker)) continue;
    return Overdue{id, r.worker, age};
  }
  return std::nullopt;
}

}  // namespace rlrun::orchestrator
