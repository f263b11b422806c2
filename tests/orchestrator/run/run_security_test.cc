// A real `rlrun CONFIG` run (configs/tiny.yaml, its trainer and rollout worker processes) with the
// default control_plane_security: curve, probed by strangers while it trains: a DEALER without
// CURVE, one with a self-made key pair, and one with the run's server key but an unknown client
// key get nothing through (no registration, no StoreSet, no GenerateResult, not a single message,
// although they claim a worker's identity), while the run keeps training. The same strangers on
// the weight transport's port (trainer rank 0's, from its log), claiming a rollout worker's place
// and forging its hello, an ack and a chunk of weights, are sent not a single message, and the
// run's weight syncs go on. The key files are private and no log of the run holds a secret. A
// run with `none` still runs to the end.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <regex>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/protocol/curve_keys.h"
#include "tests/common/eventually.h"
#include "tests/orchestrator/cli_test_util.h"
#include "tests/engine/comm/curve_probe.h"
#include "tests/orchestrator/control_probe.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::read_all;
using testing::TempDir;

constexpr auto kProbeWait = 1500ms;

unsigned mode_of(const fs::path& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

size_t lines_in(const fs::path& path) {
  const std::string text = read_all(path.string());
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// A long tiny run in the background: its orchestrator's pid, exit code and output land in `dir`.
class BackgroundRun {
 public:
  BackgroundRun(const TempDir& dir, const std::string& sets) : dir_(dir.path()) {
    const std::string cmd = str("cd '", RLRUN_SOURCE_DIR, "' && (sh -c 'echo $$ > \"", dir_, "/pid\"; exec \"",
                                RLRUN_BINARY, "\" configs/tiny.yaml --run-dir \"", run(), "\" ", sets, "' > '", dir_,
                                "/out' 2>&1; echo $? > '", dir_, "/code') &");
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  // A test that stopped early leaves no run behind (its workers die with it: PDEATHSIG).
  ~BackgroundRun() {
    if (read_all(dir_ + "/code").empty() && pid() > 0) ::kill(pid(), SIGKILL);
    wait_exit();
  }
  std::string run() const { return dir_ + "/run"; }
  std::string output() const { return read_all(dir_ + "/out"); }
  int pid() const { return std::atoi(read_all(dir_ + "/pid").c_str()); }
  int wait_exit() const {
    testing::eventually([&] { return !read_all(dir_ + "/code").empty(); }, std::chrono::seconds(60));
    const std::string code = read_all(dir_ + "/code");
    return code.empty() ? -1 : std::atoi(code.c_str());
  }

 private:
  std::string dir_;
};

// The endpoint the orchestrator logged ("control plane on tcp://127.0.0.1:PORT (...").
std::string logged_endpoint(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("control plane on (tcp://[0-9.]+:[0-9]+)")) ? m[1].str() : "";
}

// The weight transport's endpoint trainer rank 0 logged ("CURVE transport on tcp://...").
std::string logged_weight_endpoint(const fs::path& trainer_log) {
  const std::string text = read_all(trainer_log.string());
  std::smatch m;
  return std::regex_search(text, m, std::regex("weights-0` rank 0: CURVE transport on (tcp://[0-9.]+:[0-9]+)")) ? m[1].str()
                                                                                                            : "";
}

// Every file of the run folder but the key file itself, and the orchestrator's output.
std::vector<fs::path> run_logs(const fs::path& run, const fs::path& output) {
  std::vector<fs::path> files{output};
  for (const auto& entry : fs::recursive_directory_iterator(run))
    if (entry.is_regular_file() && entry.path().parent_path().filename() != "keys") files.push_back(entry.path());
  return files;
}

TEST(RunSecurity, StrangersGetNothingThroughWhileTheRunTrains) {
  TempDir dir;
  BackgroundRun run(dir, "--set number_of_steps=1000000 --set discard_group_zero_advantage=false "
                         "--set heartbeat_timeout_seconds=30");
  const fs::path metrics = fs::path(run.run()) / "metrics.jsonl";
  ASSERT_TRUE(testing::eventually([&] { return lines_in(metrics) > 0; }, std::chrono::seconds(120))) << run.output();
  const std::string endpoint = logged_endpoint(run.output());
  ASSERT_FALSE(endpoint.empty()) << run.output();

  const fs::path keys_path = fs::path(run.run()) / "keys" / kRunKeysFileName;
  EXPECT_EQ(mode_of(keys_path.parent_path()), 0700u);
  EXPECT_EQ(mode_of(keys_path), 0600u);
  auto keys = read_run_keys(keys_path.string());
  ASSERT_TRUE(keys.ok()) << keys.status().message();

  const RunKeys stranger = std::move(generate_run_keys()).value();
  SecurityOptions right_server_unknown_client = client_security(stranger);
  right_server_unknown_client.server_public = keys->server_public;
  const std::vector<std::pair<std::string, SecurityOptions>> probes = {
      {"rollout-0", SecurityOptions{}},                 // (a) no CURVE
      {"trainer-0", client_security(stranger)},         // (b) a self-made key pair
      {"rollout-0", right_server_unknown_client},       // (c) the run's server key, an unknown client key
  };
  const size_t steps_before = lines_in(metrics);
  std::vector<std::future<testing::ProbeResult>> results;
  for (const auto& [identity, security] : probes)
    results.push_back(std::async(std::launch::async, testing::probe_control_plane, endpoint, security, identity,
                                 std::chrono::milliseconds(kProbeWait)));
  for (size_t i = 0; i < results.size(); ++i) {
    const testing::ProbeResult got = results[i].get();
    EXPECT_FALSE(got.registered) << "probe " << i;
    EXPECT_FALSE(got.store_set_acked) << "probe " << i;
    EXPECT_EQ(got.messages_received, 0) << "probe " << i << " received messages meant for a worker";
  }
  // The run's own key reaches the store, and the strangers' StoreSet is not there.
  EXPECT_FALSE(testing::probe_key_is_set(endpoint, client_security(*keys), kProbeWait));

  // The weight transport: the same strangers, claiming rollout-0's place (rank 1) in the group.
  const fs::path trainer_log = fs::path(run.run()) / "logs" / "trainer-0.log";
  const std::string weights = logged_weight_endpoint(trainer_log);
  ASSERT_FALSE(weights.empty()) << "no weight transport in " << read_all(trainer_log.string());
  SecurityOptions knows_the_public_key = client_security(stranger);
  knows_the_public_key.server_public = keys->client_public;  // the weight server's key: the run's worker key
  std::vector<std::future<int>> weight_probes;
  for (const SecurityOptions& security : {SecurityOptions{}, knows_the_public_key, worker_client_security(client_security(stranger))})
    weight_probes.push_back(std::async(std::launch::async, testing::probe_curve_transport, weights, security, 1,
                                       std::chrono::milliseconds(kProbeWait), nullptr));
  for (size_t i = 0; i < weight_probes.size(); ++i)
    EXPECT_EQ(weight_probes[i].get(), 0) << "weight probe " << i << " was sent messages";
  // The real workers were never displaced: the run keeps training (weight syncs included).
  EXPECT_TRUE(testing::eventually([&] { return lines_in(metrics) > steps_before + 1; }, std::chrono::seconds(120)))
      << run.output();
  EXPECT_THAT(run.output(), ::testing::HasSubstr("rejected a CURVE peer"));
  EXPECT_THAT(read_all(trainer_log.string()), ::testing::HasSubstr("weights-0`: rejected a CURVE peer"));

  ASSERT_EQ(::kill(run.pid(), SIGINT), 0);
  EXPECT_EQ(run.wait_exit(), 1);
  const json summary = json::parse(read_all(run.run() + "/summary.json"));
  EXPECT_EQ(summary["exit"], "interrupted");
  EXPECT_EQ(summary["samples"]["lost"], 0);
  EXPECT_EQ(summary["worker_restarts"], 0) << summary.dump(2);

  for (const fs::path& file : run_logs(run.run(), fs::path(dir.path()) / "out")) {
    const std::string text = read_all(file.string());
    for (const std::string* secret : {&keys->server_secret, &keys->client_secret})
      EXPECT_EQ(text.find(*secret), std::string::npos) << file << " contains a secret key";
  }
}

TEST(RunSecurity, RunWithoutSecurityRunsToTheEnd) {
  TempDir dir;
  const fs::path run = fs::path(dir.path()) / "run";
  const testing::CliRun done = testing::run_shell(
      dir, str("cd '", RLRUN_SOURCE_DIR, "' && '", RLRUN_BINARY, "' configs/tiny.yaml --run-dir '", run.string(),
               "' --set control_plane_security=none --set discard_group_zero_advantage=false"));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_THAT(done.err, ::testing::HasSubstr("(control_plane_security: none)"));
  EXPECT_FALSE(fs::exists(run / "keys"));
  EXPECT_TRUE(logged_weight_endpoint(run / "logs" / "trainer-0.log").empty()) << "without keys the weights go over Gloo";
  const json summary = json::parse(read_all((run / "summary.json").string()));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 3);
}

}  // namespace
}  // namespace rlrun::orchestrator
