// rlrun_fault_double: the rlrun binary with rollout workers that fail on purpose, for
// fault_test.cc (a test double; the product never has these hooks). The orchestrator starts its
// workers from its own executable, so a run started with this binary gets these workers.
//
// RLRUN_FAULT_DOUBLE picks the fault (one worker, its first incarnation unless said otherwise):
//   rollout-I:weight_sync:VERSION      SIGKILL inside the weight sync of VERSION
//   rollout-I:stop_in_weight_sync:VERSION  SIGSTOP inside the weight sync of VERSION (hung, alive)
//   rollout-I:stop_after_results:N     SIGSTOP after its Nth result (hung, alive)
//   rollout-I:after_register           SIGKILL right after registering, every incarnation
//   rollout-I:slow_step:MS             its 3rd engine step takes MS milliseconds longer (a slow
//                                      host: alive, computing, not sending from its own thread)
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <memory>
#include <string>

#include "orchestrator/cli/commands.h"
#include "orchestrator/roles/rollout_hooks.h"

namespace {

using rlrun::rollout::WorkerHooks;

struct Fault {
  enum class Point { kWeightSync, kStopInWeightSync, kStopAfterResults, kAfterRegister, kSlowStep } point;
  std::string worker;
  uint64_t value = 0;
};

class FaultHooks : public WorkerHooks {
 public:
  explicit FaultHooks(Fault fault) : fault_(std::move(fault)) {}
  void after_register() override {
    if (fault_.point == Fault::Point::kAfterRegister) die(SIGKILL, "after registering");
  }
  void before_weight_receive(uint64_t version) override {
    if (fault_.point == Fault::Point::kWeightSync && version == fault_.value)
      die(SIGKILL, "inside the weight sync of version " + std::to_string(version));
    if (fault_.point == Fault::Point::kStopInWeightSync && version == fault_.value)
      die(SIGSTOP, "inside the weight sync of version " + std::to_string(version));
  }
  void after_result(uint64_t results_sent) override {
    if (fault_.point == Fault::Point::kStopAfterResults && results_sent == fault_.value)
      die(SIGSTOP, "after " + std::to_string(results_sent) + " results");
  }
  void before_engine_step(uint64_t steps_before) override {
    if (fault_.point != Fault::Point::kSlowStep || steps_before != 2) return;
    std::fprintf(stderr, "%s: fault double: engine step %llu takes %llu ms longer\n", fault_.worker.c_str(),
                 static_cast<unsigned long long>(steps_before), static_cast<unsigned long long>(fault_.value));
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::milliseconds(fault_.value));
  }

 private:
  void die(int signal, const std::string& when) {
    std::fprintf(stderr, "%s: fault double: %s %s\n", fault_.worker.c_str(), signal == SIGKILL ? "SIGKILL" : "SIGSTOP",
                 when.c_str());
    std::fflush(stderr);
    ::raise(signal);
  }
  Fault fault_;
};

// Parses RLRUN_FAULT_DOUBLE; exits 2 naming the grammar when it is malformed.
Fault parse(const std::string& text) {
  auto fail = [&] {
    std::fprintf(stderr, "RLRUN_FAULT_DOUBLE `%s`: expected rollout-I:weight_sync:VERSION, "
                 "rollout-I:stop_in_weight_sync:VERSION, "
                 "rollout-I:stop_after_results:N, rollout-I:slow_step:MS or rollout-I:after_register\n", text.c_str());
    std::exit(2);
  };
  const size_t first = text.find(':');
  if (text.rfind("rollout-", 0) != 0 || first == std::string::npos) fail();
  Fault f{Fault::Point::kAfterRegister, text.substr(0, first), 0};
  const std::string point = text.substr(first + 1);
  if (point == "after_register") return f;
  const size_t colon = point.find(':');
  if (colon == std::string::npos) fail();
  const std::string name = point.substr(0, colon), value = point.substr(colon + 1);
  char* end = nullptr;
  f.value = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') fail();
  if (name == "weight_sync") {
    f.point = Fault::Point::kWeightSync;
  } else if (name == "stop_in_weight_sync") {
    f.point = Fault::Point::kStopInWeightSync;
  } else if (name == "stop_after_results") {
    f.point = Fault::Point::kStopAfterResults;
  } else if (name == "slow_step") {
    f.point = Fault::Point::kSlowStep;
  } else {
    fail();
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);  // as rlrun's own main
  const char* spec = std::getenv("RLRUN_FAULT_DOUBLE");
  if (spec != nullptr && *spec != '\0') {
    const Fault fault = parse(spec);
    rlrun::orchestrator::set_rollout_hooks_factory(
        [fault](int32_t index, int incarnation) -> std::unique_ptr<WorkerHooks> {
          if (fault.worker != "rollout-" + std::to_string(index)) return nullptr;
          // A worker that keeps dying dies in every incarnation; the others only in their first,
          // so the replacement lives.
          if (fault.point != Fault::Point::kAfterRegister && incarnation > 0) return nullptr;
          return std::make_unique<FaultHooks>(fault);
        });
  }
  return rlrun::orchestrator::rlrun_main(argc, argv);
}
