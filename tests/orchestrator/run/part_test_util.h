// Helpers for the unit tests of the loop's parts: a LoopPort that records what is sent, turns the
// test's world in its waits and keeps a clock the test sets; and what parts are built from (a
// config, the built-in tokenizer, metrics on a registry, a ledger, workers) with no process or
// socket anywhere.
#pragma once

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/step_tally.h"
#include "orchestrator/run/workers/worker_slot.h"
#include "orchestrator/tasks/tasks.h"
#include "orchestrator/tune/loop_profile.h"

namespace rlrun::orchestrator::testing {

// The port a part gets: sends are recorded; a wait asks `done`, then turns the world (turn(), the
// time one tick later) until done holds or max_turns pass (a timeout error: the part waited for
// something that never came).
struct FakePort {
  struct Sent {
    std::string peer;
    Message message;
  };
  static constexpr std::chrono::milliseconds kTurn{20};
  std::vector<Sent> sent;
  LoopPort::Clock::time_point now = LoopPort::Clock::time_point{} + std::chrono::hours(1);
  double unix_now = 1.0e9;
  std::function<void()> turn;  // answers for the workers while a part waits
  // What the loop does at every turn besides (a part's advance()): its error ends the wait, as
  // the loop's would.
  std::function<Status()> loop;
  std::vector<bool> dispatched_in_waits;
  int turns = 0, max_turns = 100000;
  Status send_error;  // returned by every send when set

  LoopPort port() {
    LoopPort p;
    p.send = [this](const std::string& peer, const Message& message) {
      if (!send_error.ok()) return send_error;
      sent.push_back({peer, message});
      return Status();
    };
    p.wait = [this](const std::function<Result<bool>()>& done, bool dispatch) -> Status {
      dispatched_in_waits.push_back(dispatch);
      for (int n = 0;; ++n) {
        RLRUN_ASSIGN_OR_RETURN(const bool finished, done());
        if (finished) return Status();
        if (n >= max_turns) return timeout_error("FakePort: the wait never ended");
        advance(kTurn);
        ++turns;
        if (loop) RLRUN_RETURN_IF_ERROR(loop());
        if (turn) turn();
      }
    };
    p.now = [this] { return now; };
    p.unix_now = [this] { return unix_now; };
    return p;
  }
  void advance(std::chrono::steady_clock::duration d) {
    now += d;
    unix_now += std::chrono::duration<double>(d).count();
  }
  // The messages of kind T sent (to `peer`, when given), in order.
  template <class T>
  std::vector<T> sent_of(const std::string& peer = "") const {
    std::vector<T> out;
    for (const Sent& s : sent)
      if (const T* m = s.message.get<T>(); m != nullptr && (peer.empty() || s.peer == peer)) out.push_back(*m);
    return out;
  }
};

// Processes started, killed and exiting, in memory: a kill is an exit at the next poll.
struct FakeLauncher : Launcher {
  std::vector<ProcessSpec> started;
  std::vector<std::string> killed;
  std::vector<ProcessExit> exits;  // the next poll's
  Status start_error;
  Status start(const ProcessSpec& spec) override {
    if (!start_error.ok()) return start_error;
    started.push_back(spec);
    return Status();
  }
  std::vector<ProcessExit> poll_exits() override { return std::exchange(exits, {}); }
  Status kill(const std::string& name) override {
    killed.push_back(name);
    exits.push_back(ProcessExit{name, 0, 9});
    return Status();
  }
  void stop_all(std::chrono::milliseconds) override {}
  size_t live_count() const override { return 0; }
};

inline WorkerSlot worker(Role role, int rank, WorkerState state = WorkerState::kReady) {
  WorkerSlot w;
  w.name = worker_name(role, rank);
  w.role = role;
  w.rank = rank;
  w.log_path = "/logs/" + w.name + ".log";
  w.registered = state != WorkerState::kStarting && state != WorkerState::kDead;
  w.state = state;
  w.spec.name = w.name;
  return w;
}

// A task with fixed evaluation problems; training prompts are "p0", "p1", ...
class FixedTask : public Task {
 public:
  explicit FixedTask(std::vector<Problem> eval = {}) : eval_(std::move(eval)) {}
  std::string name() const override { return "fixed"; }
  Problem next_train() override {
    Problem p;
    p.prompt = str("p", drawn_++);
    p.answer.push_back('a');  // not = "a": GCC 12 warns a false -Wrestrict on it here
    return p;
  }
  const std::vector<Problem>& eval_set() const override { return eval_; }
  double reward(const Problem& p, std::string_view completion) const override { return correct(p, completion) ? 1 : 0; }
  bool correct(const Problem& p, std::string_view completion) const override { return completion == p.answer; }

 private:
  std::vector<Problem> eval_;
  uint64_t drawn_ = 0;
};

// Everything a part is built from: trainer-0 and two ready rollout workers by default.
struct PartEnv {
  Config config;
  engine::Tokenizer tokenizer = tokenizer_from(ModelSection{}).value();
  PromptFormat format = PromptFormat::raw(tokenizer);
  prometheus::Registry registry;
  std::vector<WorkerSlot> workers{worker(Role::kTrainer, 0), worker(Role::kRollout, 0), worker(Role::kRollout, 1)};
  std::unique_ptr<RunMetrics> metrics;
  SampleLedger ledger;
  StepTally steps;
  tune::LoopProfile profile;
  FakePort port;

  PartEnv() {
    config.group_size = 2;
    config.prompts_batch_size_for_trainer = 2;
    config.max_tokens = 8;
    config.max_model_len = 64;
    config.max_prompt_tokens = 32;
    config.enable_prompt_prefetch = false;
    make_metrics();
  }
  void make_metrics() {
    std::vector<std::string> rollouts, processes;
    for (const WorkerSlot& w : workers) {
      processes.push_back(w.name);
      if (w.role == Role::kRollout) rollouts.push_back(w.name);
    }
    metrics = std::make_unique<RunMetrics>(registry, rollouts, processes);
  }
  std::vector<int32_t> ids(const std::string& text) const { return tokenizer.encode(text); }
};

}  // namespace rlrun::orchestrator::testing
