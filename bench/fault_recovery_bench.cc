// fault_recovery_bench - how fast a run recovers from a killed rollout worker or trainer rank.
//
// For each of RUNS runs of configs/tiny.yaml with two rollout workers (the defaults otherwise:
// heartbeat_interval_seconds 1, worker_restart_backoff_seconds 2, unless --set overrides them),
// SIGKILL rollout-1 at a random point after the first step, let the run finish, and read
// summary.json's worker_failures against the kill time (Unix clock, same machine):
//   detect  kill -> the orchestrator noticed (launcher exit; a heartbeat silence for SIGSTOP)
//   ready   kill -> the replacement had the current weights (includes the restart back-off)
//   work    kill -> the replacement took its first request
// With --stop the worker gets SIGSTOP instead (a hung worker: found by heartbeat silence, or in a
// weight sync heartbeat_timeout_seconds after the sender finished). Prints each run and the
// medians. With --worker trainer-R the victim is a trainer rank, and the times are those of
// summary.json's trainer_failures: detect, ready (every rank and rollout worker holds the restored
// checkpoint's weights: includes trainer_restart_backoff_seconds) and work (the first step after
// the restart completed). Never fails on time.
// Usage: fault_recovery_bench [RUNS] [--stop] [--worker NAME] [--set key=value ...]
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int lines_in(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Sample {
  double detect = -1, ready = -1, work = -1;
};

// The run in the background, from the source folder (the config's relative paths).
std::string str_cmd(const fs::path& dir, const std::string& rlrun, const std::string& sets) {
  return std::string("cd '") + RLRUN_BENCH_SOURCE_DIR + "' && ('" + rlrun + "' configs/tiny.yaml --run-dir '" +
         (dir / "run").string() + "'" + sets + " > '" + (dir / "out").string() + "' 2>&1; echo $? > '" +
         (dir / "code").string() + "') &";
}

// One run; false when it did not go as planned (printed).
bool run_once(const fs::path& dir, const std::string& rlrun, const std::string& sets, const std::string& victim,
              int signal, std::mt19937& rng, Sample& out) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cmd = str_cmd(dir, rlrun, sets);
  if (std::system(cmd.c_str()) != 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (lines_in(dir / "run" / "metrics.jsonl") < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 500)(rng)));
  const std::string log = read_file(dir / "out"), key = victim + " registered (pid ";
  const size_t at = log.find(key);
  if (at == std::string::npos)
    return std::printf("  no pid for %s in %s\n", victim.c_str(), (dir / "out").c_str()), false;
  const double killed = unix_now();
  const int pid = std::atoi(log.c_str() + at + key.size());
  ::kill(pid, signal);
  while (read_file(dir / "code").empty() && std::chrono::steady_clock::now() < deadline + 120s)
    std::this_thread::sleep_for(20ms);
  ::kill(pid, SIGKILL);  // a stopped worker the run did not kill (then no failure is recorded)
  const auto summary = nlohmann::json::parse(read_file(dir / "run" / "summary.json"), nullptr, false);
  const bool trainer = victim.rfind("trainer-", 0) == 0;
  const char* failures = trainer ? "trainer_failures" : "worker_failures";
  if (summary.is_discarded() || summary[failures].empty())
    return std::printf("  no failure recorded; see %s\n", (dir / "out").c_str()), false;
  const auto& f = summary[failures][0];
  auto since_kill = [&](const char* k) { return f[k].is_number() ? f[k].get<double>() - killed : -1.0; };
  out = trainer ? Sample{since_kill("detected_at"), since_kill("restart_ready_at"), since_kill("first_step_at")}
                : Sample{since_kill("detected_at"), since_kill("replacement_ready_at"),
                         since_kill("replacement_first_request_at")};
  std::printf("  detect %.3f s  ready %.3f s  work %.3f s  (exit %s, lost %lld)\n", out.detect, out.ready, out.work,
              summary["exit"].get<std::string>().c_str(), static_cast<long long>(summary["samples"]["lost"].get<int64_t>()));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::string sets = " --set inference_num_workers=2 --set number_of_steps=100 --set discard_group_zero_advantage=false";
  int signal = SIGKILL;
  std::string victim = "rollout-1";
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--stop") {
      signal = SIGSTOP;
    } else if (std::string(argv[i]) == "--worker" && i + 1 < argc) {
      victim = argv[++i];
    } else {
      sets += std::string(" '") + argv[i] + "'";
    }
  }
  const std::string rlrun = (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "rlrun").string();
  const fs::path dir = fs::temp_directory_path() / ("rlrun_fault_bench_" + std::to_string(::getpid()));
  std::mt19937 rng(std::random_device{}());
  std::vector<double> detect, ready, work;
  std::printf("fault_recovery_bench: %d run(s) of configs/tiny.yaml%s; %s %s after step 1\n", runs, sets.c_str(),
              signal == SIGKILL ? "SIGKILL" : "SIGSTOP", victim.c_str());
  for (int i = 0; i < runs; ++i) {
    Sample s;
    if (!run_once(dir, rlrun, sets, victim, signal, rng, s)) continue;
    if (s.detect >= 0) detect.push_back(s.detect);
    if (s.ready >= 0) ready.push_back(s.ready);
    if (s.work >= 0) work.push_back(s.work);
  }
  std::printf("median over %zu run(s): kill->detect %.3f s, kill->replacement ready %.3f s, "
              "kill->replacement first request (trainer: first step) %.3f s\n",
              detect.size(), median(detect), median(ready), median(work));
  fs::remove_all(dir);
  return 0;
}
