#include "orchestrator/tune/loop_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "common/observe/log.h"
#include "common/status.h"
#include "orchestrator/run/workers/core_balance.h"

namespace rlrun::orchestrator::tune {
namespace {

constexpr double kEpsilon = 1e-12;
constexpr int64_t kMaxEvents = 20'000'000;  // a bound on one simulation, whatever the settings

// Speed of a process with `t` threads relative to one with `t0` (Amdahl, 90% parallel: an
// assumption, used only when the thread count differs from the measured one).
double thread_speed(int64_t t, int64_t t0) {
  auto amdahl = [](double n) { return 1.0 / (0.1 + 0.9 / n); };
  return amdahl(static_cast<double>(t)) / amdahl(static_cast<double>(t0));
}

struct Seq {
  int64_t prompt = 0, target = 1, generated = 0;
  uint64_t group = 0;
  int64_t prefill = 0;  // tokens computed at admission: the prompt, or its last one when forked from a sibling
};

// A process: a rollout worker or a trainer rank. `remaining` is work left at full speed.
struct Proc {
  int node = 0;
  int64_t threads = 1;
  double weight = 1;      // each thread's CPU weight where cores are contended (1.25^-nice)
  double kind_speed = 1;  // the cluster's generation or training speed
  double speed = 1;       // kind speed x thread speed
  bool busy = false;
  double remaining = 0;
};

struct Worker {
  Proc proc;
  std::deque<Seq> waiting;
  std::vector<Seq> running;
  bool loading = false, load_pending = false;
  int64_t lanes_used = 0;
  int64_t version = 0;  // weights loaded
  double idle = 0;
  std::vector<uint64_t> to_score, scoring;  // kept groups waiting for / in the KL reference's pass
};

struct Group {
  int64_t left = 0;
  int worker = 0;
  int64_t tokens = 0;
  int64_t version = -1;  // weights of its first token
};

class Sim {
 public:
  Sim(const LoopCosts& c, const LoopSettings& s, const Cluster& cl, const SimOptions& o)
      : c_(c), s_(s), cl_(cl), o_(o), rng_(o.seed) {
    std::vector<double> weights;
    for (const auto& [len, n] : c.completion_tokens) {
      lengths_.push_back(std::max<int64_t>(1, len));
      weights.push_back(static_cast<double>(n));
    }
    length_dist_ = std::discrete_distribution<size_t>(weights.begin(), weights.end());
  }

  Prediction run();

 private:
  void place();
  void dispatch();
  void start_engine_steps();
  void end_engine_step(int w);
  void start_training();
  void finish_step();
  void balance_cores();  // balance_cpu_threads: a window's measures, CoreBalance's decision
  void set_threads(Proc& p, int64_t threads);
  void apply_share(const CoreShare& share);
  void keep(uint64_t group);  // a group kept for training: queued for a batch, or first scored
  void settle();
  double advance();  // to the next event; returns dt (infinity when nothing can happen)

  const LoopCosts& c_;
  const LoopSettings& s_;
  const Cluster& cl_;
  const SimOptions& o_;
  std::mt19937_64 rng_;
  std::vector<int64_t> lengths_;
  std::discrete_distribution<size_t> length_dist_;

  double now_ = 0;
  std::vector<Worker> workers_;
  std::vector<Proc> ranks_;
  std::map<uint64_t, Group> groups_;
  uint64_t next_group_ = 0;
  int64_t outstanding_ = 0;
  std::deque<uint64_t> scored_;
  std::vector<std::pair<double, uint64_t>> rewards_;  // (time scored, group)
  struct Arrival {  // a group's request on its way to a worker (request_overhead_seconds)
    double at = 0;
    int worker = 0;
    std::vector<Seq> seqs;
  };
  std::vector<Arrival> arrivals_;
  enum class Trainer { kWaiting, kTraining, kAfterTrain, kSyncing } trainer_ = Trainer::kWaiting;
  double trainer_timer_ = 0;  // end of kAfterTrain / kSyncing
  int64_t step_ = 0;           // steps done = policy version
  int64_t batch_groups_ = 0;
  double trainer_idle_ = 0;
  double staleness_sum_ = 0;
  int64_t staleness_n_ = 0;
  int64_t generated_groups_ = 0;
  // balance_cpu_threads, as the orchestrator does it (run/workers/cores.cc): the same windows and rules.
  std::optional<CoreBalance> balance_;
  LoadWindows load_windows_;
  int64_t lent_trainer_threads_ = 0, lent_rollout_threads_ = 0;  // the share in force (0: no balancing)
};

void Sim::place() {
  const int64_t procs = s_.trainer_num_workers + s_.inference_num_workers;
  auto node_of = [&](int64_t i) { return static_cast<int>(i * cl_.nodes / procs); };  // contiguous blocks
  auto make = [&](int64_t i, double kind_speed) {
    Proc p;
    p.node = node_of(i);
    p.kind_speed = kind_speed;
    set_threads(p, threads_per_process(s_, cl_));
    return p;
  };
  for (int64_t r = 0; r < s_.trainer_num_workers; ++r) ranks_.push_back(make(r, cl_.training_speed));
  for (int64_t w = 0; w < s_.inference_num_workers; ++w) {
    Worker wk;
    wk.proc = make(s_.trainer_num_workers + w, cl_.generation_speed);
    if (s_.max_async_rollout > 0) wk.proc.weight = std::pow(1.25, -static_cast<double>(s_.rollout_cpu_nice));
    workers_.push_back(std::move(wk));
  }
  if (s_.balance_cpu_threads && !cl_.devices && s_.cpu_threads_per_worker == 0 && cl_.nodes == 1) {
    const int t = static_cast<int>(threads_per_process(s_, cl_));
    balance_.emplace(CoreShare{t, t}, static_cast<int>(s_.trainer_num_workers), static_cast<int>(s_.inference_num_workers));
    lent_trainer_threads_ = lent_rollout_threads_ = t;
  }
}

void Sim::set_threads(Proc& p, int64_t threads) {
  p.threads = threads;
  p.speed = p.kind_speed * (cl_.devices ? 1.0 : thread_speed(threads, c_.threads));
}

void Sim::balance_cores() {
  LoopTotals now;  // the simulated rollout idle already leaves out KL scoring (advance())
  now.step = step_;
  now.loop_seconds = now_;
  now.trainer_idle_seconds = trainer_idle_;
  for (const Worker& wk : workers_) now.rollout_idle_seconds += wk.idle;
  const std::optional<WindowLoad> load =
      load_windows_.at_step_end(now, static_cast<int>(workers_.size()), static_cast<int>(lent_rollout_threads_));
  if (!load) return;
  const std::optional<CoreBalance::Change> change = balance_->observe(*load);
  if (change) apply_share(change->share);
}

// A lent share: the borrower keeps its share's place in the processor sharing (its neighbours
// slowing it is in what the run measured) and runs at the speed the run measured with the lent
// threads; a lend the run never measured (the rollout side's, or another thread count) changes
// nothing, so its trial undoes it as a lend that did not pay.
void Sim::apply_share(const CoreShare& share) {
  const CoreShare& base = balance_->base();
  for (Proc& r : ranks_) {
    set_threads(r, base.trainer_threads);
    if (share.trainer_threads != base.trainer_threads && share.trainer_threads == c_.trainer_lent_threads &&
        c_.trainer_lent_speed > 0)
      r.speed *= c_.trainer_lent_speed;
  }
  lent_trainer_threads_ = share.trainer_threads;
  lent_rollout_threads_ = share.rollout_threads;
}

void Sim::dispatch() {
  const int64_t lanes = s_.individual_sample_lanes ? s_.max_concurrent_prompts_per_server / s_.group_size
                                                   : s_.max_concurrent_prompts_per_server;
  while (outstanding_ / s_.prompts_batch_size_for_trainer <= s_.max_async_rollout) {
    int best = -1;
    for (size_t w = 0; w < workers_.size(); ++w) {
      if (workers_[w].lanes_used >= std::max<int64_t>(1, lanes)) continue;
      if (best < 0 || workers_[w].lanes_used < workers_[static_cast<size_t>(best)].lanes_used) best = static_cast<int>(w);
    }
    if (best < 0) return;
    Worker& wk = workers_[static_cast<size_t>(best)];
    const uint64_t id = next_group_++;
    Group& g = groups_[id];
    g.left = s_.group_size;
    g.worker = best;
    const int64_t prompt = std::max<int64_t>(1, std::llround(c_.prompt_tokens));
    Arrival a{now_ + c_.request_overhead_seconds, best, {}};
    const bool shared_training = s_.share_prompts_in_training && s_.group_size > 1 && prompt > 1;
    if (shared_training) g.tokens += prompt - 1;  // packed once; each sample starts with its last token
    for (int64_t i = 0; i < s_.group_size; ++i) {
      const int64_t target = lengths_[length_dist_(rng_)];
      a.seqs.push_back({prompt, target, 0, id, i == 0 ? prompt : 1});  // the others fork the prompt's KV
      g.tokens += (shared_training ? 1 : prompt) + target;
    }
    arrivals_.push_back(std::move(a));
    ++wk.lanes_used;
    ++outstanding_;
    ++generated_groups_;
  }
}

// Every idle worker with sequences starts its next engine step (or its pending weight load, or
// the KL reference's pass over the groups that came to it: between engine steps, as the worker).
void Sim::start_engine_steps() {
  for (Worker& wk : workers_) {
    if (wk.proc.busy) continue;
    if (wk.load_pending) {
      wk.load_pending = false;
      wk.loading = true;
      wk.proc.busy = true;
      wk.proc.remaining = c_.weight_load_seconds * wk.proc.speed;  // wall seconds, not sped up
      continue;
    }
    if (!wk.to_score.empty()) {
      int64_t tokens = 0;
      for (uint64_t id : wk.to_score) tokens += groups_[id].tokens;
      wk.scoring = std::move(wk.to_score);
      wk.to_score.clear();
      wk.proc.busy = true;
      wk.proc.remaining = c_.reference_seconds_per_token * static_cast<double>(tokens);
      continue;
    }
    if (wk.waiting.empty() && wk.running.empty()) continue;
    rollout::StepShape shape;
    shape.decoding = static_cast<int64_t>(wk.running.size());
    for (const Seq& q : wk.running) shape.context_tokens += q.prompt + q.generated - 1;
    while (!wk.waiting.empty() && static_cast<int64_t>(wk.running.size()) < s_.max_num_seqs) {
      const Seq& q = wk.waiting.front();
      if (shape.prefill_tokens > 0 && shape.prefill_tokens + q.prefill > s_.max_prefill_tokens) break;
      shape.prefill_tokens += q.prefill;
      shape.context_tokens += q.prompt - q.prefill;
      Group& g = groups_[q.group];
      if (g.version < 0) g.version = wk.version;
      wk.running.push_back(q);
      wk.waiting.pop_front();
    }
    wk.proc.busy = true;
    wk.proc.remaining = c_.engine_step.seconds(shape);
  }
}

void Sim::end_engine_step(int w) {
  Worker& wk = workers_[static_cast<size_t>(w)];
  if (wk.loading) {
    wk.loading = false;
    wk.version = step_ + 1;  // loads happen in the sync that makes version step_ + 1
    return;
  }
  if (!wk.scoring.empty()) {
    scored_.insert(scored_.end(), wk.scoring.begin(), wk.scoring.end());
    wk.scoring.clear();
    return;
  }
  std::vector<Seq> still;
  for (Seq& q : wk.running) {
    if (++q.generated < q.target) {
      still.push_back(q);
      continue;
    }
    Group& g = groups_[q.group];
    if (--g.left > 0) continue;
    --wk.lanes_used;
    rewards_.push_back({now_ + c_.reward_seconds, q.group});
  }
  wk.running = std::move(still);
}

void Sim::start_training() {
  if (trainer_ != Trainer::kWaiting || static_cast<int64_t>(scored_.size()) < s_.prompts_batch_size_for_trainer) return;
  int64_t tokens = 0;
  for (int64_t i = 0; i < s_.prompts_batch_size_for_trainer; ++i) {
    const Group& g = groups_[scored_.front()];
    tokens += g.tokens;
    staleness_sum_ += static_cast<double>(step_ - g.version);
    ++staleness_n_;
    groups_.erase(scored_.front());
    scored_.pop_front();
  }
  const double per_rank = static_cast<double>(tokens) / static_cast<double>(s_.trainer_num_workers);
  const double reference = s_.kl_reference && !s_.reference_on_rollout ? c_.reference_seconds_per_token : 0.0;
  for (Proc& r : ranks_) {
    r.busy = true;
    r.remaining = (c_.train_seconds_per_token + reference) * per_rank +
                  c_.train_seconds_per_optimizer_step * static_cast<double>(s_.number_of_minibatches);
  }
  trainer_ = Trainer::kTraining;
}

void Sim::keep(uint64_t group) {
  if (!s_.kl_reference || !s_.reference_on_rollout) return scored_.push_back(group);
  size_t best = 0;  // the least busy worker (orchestrator: Dispatcher::least_busy_worker)
  for (size_t w = 1; w < workers_.size(); ++w)
    if (workers_[w].lanes_used < workers_[best].lanes_used) best = w;
  workers_[best].to_score.push_back(group);
}

void Sim::finish_step() {
  ++step_;
  outstanding_ -= s_.prompts_batch_size_for_trainer;
  trainer_ = Trainer::kWaiting;
  if (balance_ && step_ < o_.steps) balance_cores();
}

// Demand on a node's cores: threads (or a fraction of one, the orchestrator's load), each of a
// CPU weight.
struct Demand {
  double threads;
  double weight;
};

// The core fraction each thread of a demand gets under weighted fair sharing: a share of the
// node's slots proportional to its weight, at most one core; what a capped thread cannot use goes
// to the others (water-filling).
std::vector<double> fair_shares(const std::vector<Demand>& demands, double slots) {
  std::vector<double> share(demands.size(), -1.0);  // -1: not capped yet
  while (true) {
    double weights = 0;
    for (size_t i = 0; i < demands.size(); ++i)
      if (share[i] < 0) weights += demands[i].weight * demands[i].threads;
    if (weights <= kEpsilon) return share;
    const double per_weight = slots / weights;
    bool capped = false;
    for (size_t i = 0; i < demands.size(); ++i) {
      if (share[i] >= 0 || per_weight * demands[i].weight < 1.0) continue;
      share[i] = 1.0;
      slots -= demands[i].threads;
      capped = true;
    }
    if (!capped) {
      for (size_t i = 0; i < demands.size(); ++i)
        if (share[i] < 0) share[i] = per_weight * demands[i].weight;
      return share;
    }
  }
}

double Sim::advance() {
  // Rates under weighted processor sharing, per node (the orchestrator's own load on node 0).
  std::vector<Proc*> busy;
  for (Proc& r : ranks_) if (r.busy) busy.push_back(&r);
  for (Worker& wk : workers_) if (wk.proc.busy) busy.push_back(&wk.proc);
  std::map<const Proc*, double> core_share;  // per thread, in [0, 1]
  if (!cl_.devices) {
    for (int64_t node = 0; node < cl_.nodes; ++node) {
      std::vector<const Proc*> here;
      std::vector<Demand> demands;
      for (const Proc* p : busy)
        if (p->node == node) {
          here.push_back(p);
          demands.push_back({static_cast<double>(p->threads), p->weight});
        }
      if (node == 0) demands.push_back({c_.orchestrator_cores, 1.0});
      const std::vector<double> share = fair_shares(demands, static_cast<double>(cl_.slots_per_node));
      for (size_t i = 0; i < here.size(); ++i) core_share[here[i]] = share[i];
    }
  }
  auto rate = [&](const Proc& p) { return cl_.devices ? p.speed : p.speed * core_share.at(&p); };
  double dt = std::numeric_limits<double>::infinity();
  for (Proc* p : busy) dt = std::min(dt, p->remaining / rate(*p));
  for (const auto& [at, g] : rewards_) dt = std::min(dt, at - now_);
  for (const Arrival& a : arrivals_) dt = std::min(dt, a.at - now_);
  // A sync whose time is up may still wait for a worker's load (at its next step boundary).
  if ((trainer_ == Trainer::kAfterTrain || trainer_ == Trainer::kSyncing) && trainer_timer_ > now_)
    dt = std::min(dt, trainer_timer_ - now_);
  if (!std::isfinite(dt)) return dt;
  dt = std::max(dt, 0.0);
  for (Proc* p : busy) p->remaining -= rate(*p) * dt;
  if (trainer_ == Trainer::kWaiting) trainer_idle_ += dt;
  for (Worker& wk : workers_)
    if (wk.lanes_used == 0 && wk.scoring.empty() && wk.to_score.empty()) wk.idle += dt;
  now_ += dt;
  return dt;
}

// Everything due at now_: arrived requests, finished engine steps, scored groups, the trainer's
// phase changes.
void Sim::settle() {
  for (size_t i = 0; i < arrivals_.size();) {
    if (arrivals_[i].at > now_ + kEpsilon) {
      ++i;
      continue;
    }
    std::deque<Seq>& queue = workers_[static_cast<size_t>(arrivals_[i].worker)].waiting;
    queue.insert(queue.end(), arrivals_[i].seqs.begin(), arrivals_[i].seqs.end());
    arrivals_.erase(arrivals_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (size_t w = 0; w < workers_.size(); ++w)
    if (workers_[w].proc.busy && workers_[w].proc.remaining <= kEpsilon) {
      workers_[w].proc.busy = false;
      end_engine_step(static_cast<int>(w));
    }
  for (size_t i = 0; i < rewards_.size();) {
    if (rewards_[i].first > now_ + kEpsilon) {
      ++i;
      continue;
    }
    const uint64_t id = rewards_[i].second;
    rewards_.erase(rewards_.begin() + static_cast<std::ptrdiff_t>(i));
    if (std::bernoulli_distribution(std::clamp(c_.group_discard_fraction, 0.0, 0.99))(rng_)) {
      groups_.erase(id);
      --outstanding_;
    } else {
      keep(id);
    }
  }
  if (trainer_ == Trainer::kTraining) {
    bool done = true;
    for (Proc& r : ranks_) {
      if (r.busy && r.remaining <= kEpsilon) r.busy = false;
      done = done && !r.busy;
    }
    if (done) {
      const double gradient_bytes = 4.0 * static_cast<double>(c_.parameters);
      const double ring = s_.trainer_num_workers > 1
                              ? 2.0 * static_cast<double>(s_.trainer_num_workers - 1) /
                                    static_cast<double>(s_.trainer_num_workers) * gradient_bytes /
                                    cl_.allreduce_bytes_per_second
                              : 0.0;
      trainer_ = Trainer::kAfterTrain;
      trainer_timer_ = now_ + c_.train_seconds_fixed + ring * static_cast<double>(s_.number_of_minibatches);
    }
  }
  if (trainer_ == Trainer::kAfterTrain && now_ + kEpsilon >= trainer_timer_) {
    // Gloo sends to each receiver in turn (scaled by their number); NCCL pipelines a ring.
    const double receivers = static_cast<double>(s_.inference_num_workers) / static_cast<double>(c_.measured_rollout_workers);
    trainer_ = Trainer::kSyncing;
    trainer_timer_ = now_ + c_.weight_sync_seconds * (cl_.devices ? 1.0 : receivers);
    for (Worker& wk : workers_) wk.load_pending = true;
  }
  if (trainer_ == Trainer::kSyncing && now_ + kEpsilon >= trainer_timer_) {
    bool loaded = true;
    for (const Worker& wk : workers_) loaded = loaded && !wk.load_pending && !wk.loading;
    if (loaded) finish_step();
  }
}

Prediction Sim::run() {
  Prediction out;
  place();
  int64_t events = 0;
  while (true) {
    settle();
    if (step_ >= o_.steps) break;
    dispatch();
    start_engine_steps();
    start_training();
    if (advance() == std::numeric_limits<double>::infinity() || ++events > kMaxEvents) {
      out.feasible = false;
      out.reason = "the simulated loop stopped making progress";
      return out;
    }
  }
  out.steps = step_;
  out.seconds_per_step = now_ / static_cast<double>(step_);
  out.trainer_idle_fraction = now_ > 0 ? trainer_idle_ / now_ : 0;
  double idle = 0;
  for (const Worker& wk : workers_) idle += wk.idle;
  out.rollout_idle_fraction = now_ > 0 ? idle / now_ / static_cast<double>(workers_.size()) : 0;
  out.groups_generated_per_step = static_cast<double>(generated_groups_) / static_cast<double>(step_);
  out.trainer_threads = balance_ ? lent_trainer_threads_ : ranks_.front().threads;
  out.rollout_threads = balance_ ? lent_rollout_threads_ : workers_.front().proc.threads;
  out.mean_staleness = staleness_n_ ? staleness_sum_ / static_cast<double>(staleness_n_) : 0;
  return out;
}

}  // namespace

int64_t threads_per_process(const LoopSettings& settings, const Cluster& cluster) {
  if (cluster.devices) return 1;
  if (settings.cpu_threads_per_worker > 0) return settings.cpu_threads_per_worker;
  const int64_t procs = settings.trainer_num_workers + settings.inference_num_workers;
  const int64_t per_node = (procs + cluster.nodes - 1) / cluster.nodes;
  return std::max<int64_t>(1, cluster.slots_per_node / per_node);
}

Prediction simulate(const LoopCosts& costs, const LoopSettings& settings, const Cluster& cluster,
                    const SimOptions& options) {
  Prediction bad;
  bad.feasible = false;
  if (costs.completion_tokens.empty()) {
    bad.reason = "no completion lengths measured";
    return bad;
  }
  if (settings.inference_num_workers < 1 || settings.trainer_num_workers < 1 || settings.group_size < 1 ||
      settings.prompts_batch_size_for_trainer < 1 || settings.number_of_minibatches < 1 ||
      settings.max_concurrent_prompts_per_server < 1 || settings.max_num_seqs < 1 || options.steps < 1) {
    bad.reason = "a setting is below its minimum";
    return bad;
  }
  if (settings.prompts_batch_size_for_trainer % settings.number_of_minibatches != 0) {
    bad.reason = "number_of_minibatches must divide prompts_batch_size_for_trainer";
    return bad;
  }
  if (cluster.devices && settings.trainer_num_workers + settings.inference_num_workers > cluster.nodes * cluster.slots_per_node) {
    bad.reason = "more processes than devices";
    return bad;
  }
  return Sim(costs, settings, cluster, options).run();
}

}  // namespace rlrun::orchestrator::tune
