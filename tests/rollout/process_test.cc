// `rlrun rollout` as a real process against a ControlServer playing the orchestrator: --help,
// usage errors, then register -> generate -> heartbeat -> shutdown with exit status 0.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/observe/log.h"
#include "common/protocol/control_plane.h"

namespace rlrun {
namespace {

using namespace std::chrono_literals;

std::string config_path() { return std::string(RLRUN_SOURCE_DIR) + "/configs/tiny.yaml"; }

int run_shell(const std::string& args, std::string* out) {
  const std::string file = ::testing::TempDir() + "rollout_cli_out.txt";
  const int rc = std::system(str("'", RLRUN_BINARY, "' ", args, " >'", file, "' 2>&1").c_str());
  std::ifstream in(file);
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(RolloutProcess, HelpAndUsageErrors) {
  std::string out;
  EXPECT_EQ(run_shell("rollout --help", &out), 0);
  EXPECT_NE(out.find("--orchestrator tcp://HOST:PORT"), std::string::npos) << out;
  EXPECT_EQ(run_shell("rollout --index 0 --config " + config_path(), &out), 2);
  EXPECT_NE(out.find("--orchestrator"), std::string::npos) << out;
  EXPECT_EQ(run_shell("rollout --orchestrator tcp://127.0.0.1:1 --index x " + config_path(), &out), 2);
  EXPECT_NE(out.find("--index"), std::string::npos) << out;
  EXPECT_EQ(run_shell("rollout --orchestrator tcp://127.0.0.1:1 --index 0 --set max_num_seqs=-3 " + config_path(), &out), 2);
}

TEST(RolloutProcess, RegistersGeneratesAndShutsDown) {
  auto server = ControlServer::bind({});
  ASSERT_TRUE(server.ok());
  const std::string endpoint = (*server)->endpoint();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(RLRUN_BINARY, RLRUN_BINARY, "rollout", "--orchestrator", endpoint.c_str(), "--index", "1", "--config",
          config_path().c_str(), "--set", "heartbeat_interval_seconds=0.1", "--set", "log_level=warn",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string peer;
  std::vector<GenerateResult> results;
  int heartbeats = 0;
  bool sent_request = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline && (results.size() < 2 || heartbeats < 2)) {
    auto in = (*server)->poll(100ms);
    if (!in.ok()) continue;
    const Message& m = in->message;
    if (const Register* reg = m.get<Register>()) {
      EXPECT_EQ(reg->role, Role::kRollout);
      EXPECT_EQ(reg->rank, 1);
      EXPECT_EQ(reg->pid, static_cast<uint32_t>(pid));
      peer = in->peer;
      ASSERT_TRUE((*server)->send(peer, RegisterAck{1, "", {}}, m.correlation_id).ok());
    } else if (m.get<Heartbeat>() != nullptr) {
      ++heartbeats;
      ASSERT_TRUE((*server)->send(in->peer, Heartbeat{}, m.correlation_id).ok());
    } else if (const GenerateResult* r = m.get<GenerateResult>()) {
      results.push_back(*r);
    }
    if (!peer.empty() && !sent_request) {
      GenerateRequest req;
      req.request_id = 9;
      req.prompt_ids = std::vector<int32_t>{3, 4, 5, 6};
      req.num_samples = 2;
      req.max_tokens = 6;
      ASSERT_TRUE((*server)->send(peer, req, 1).ok());
      sent_request = true;
    }
  }
  ASSERT_EQ(results.size(), 2u);
  for (const GenerateResult& r : results) {
    EXPECT_EQ(r.request_id, 9u);
    EXPECT_EQ(r.token_ids.size(), 6u);
    EXPECT_EQ(r.finish_reason, FinishReason::kLength);
  }
  EXPECT_GE(heartbeats, 2);
  ASSERT_TRUE((*server)->send(peer, Shutdown{"done"}).ok());
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 100 && done == 0; ++i) {
    done = waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(100ms);
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "rlrun rollout did not exit within 10 s of Shutdown";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace rlrun
