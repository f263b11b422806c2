// The run's control plane as `rlrun CONFIG` sets it up (bind_run_control_plane): key files and
// their modes, a worker's view of them (worker_control_security, --control-keys), and who gets
// through, served by the real RendezvousService on real sockets.
#include "orchestrator/run/workers/control_plane.h"

#include <sys/stat.h>

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/protocol/curve_keys.h"
#include "orchestrator/run/workers/rendezvous.h"
#include "tests/orchestrator/cli_test_util.h"
#include "tests/orchestrator/control_probe.h"

namespace rlrun::orchestrator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr auto kWait = 400ms;

unsigned mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

Config config_with(ControlPlaneSecurity security) {
  Config c;
  c.control_plane_security = security;
  return c;
}

// Polls the plane's server on its own thread: rendezvous requests go to a real RendezvousService,
// a Register gets a RegisterAck (as the orchestrator would).
class ServedPlane {
 public:
  explicit ServedPlane(RunControlPlane plane) : plane_(std::move(plane)) {
    thread_ = std::thread([this] {
      RendezvousService store;
      while (!stop_) {
        store.expire(*plane_.server);
        auto in = plane_.server->poll(20ms);
        if (!in.ok()) continue;
        if (store.handle(*plane_.server, *in)) continue;
        if (in->message.get<Register>())
          (void)plane_.server->send(in->peer, RegisterAck{1, "", {}}, in->message.correlation_id);
      }
    });
  }
  ~ServedPlane() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return plane_.server->endpoint(); }
  const RunControlPlane& plane() const { return plane_; }

 private:
  RunControlPlane plane_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(RunControlPlane, CurveWritesPrivateKeysAndAdmitsOnlyTheirHolder) {
  TempDir dir;
  auto bound = bind_run_control_plane(config_with(ControlPlaneSecurity::kCurve), dir.path());
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  ServedPlane served(std::move(*bound));
  const std::string keys_path = served.plane().keys_path;
  EXPECT_EQ(keys_path, dir.path() + "/keys/control_keys");
  EXPECT_EQ(mode_of(dir.path() + "/keys"), 0700u);
  EXPECT_EQ(mode_of(keys_path), 0600u);
  EXPECT_EQ(control_key_flags(served.plane()), (std::vector<std::string>{"--control-keys", keys_path}));

  auto worker = worker_control_security(keys_path);
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  EXPECT_EQ(worker->mechanism, SecurityOptions::Mechanism::kCurve);
  EXPECT_TRUE(worker->server_secret.empty()) << "a worker never needs the server's secret";

  const RunKeys other = std::move(generate_run_keys()).value();
  SecurityOptions right_server_foreign_client = client_security(other);
  right_server_foreign_client.server_public = worker->server_public;
  const std::pair<const char*, SecurityOptions> strangers[] = {
      {"no CURVE", SecurityOptions{}},
      {"a self-made key pair", client_security(other)},
      {"the right server key, an unknown client key", right_server_foreign_client},
  };
  for (const auto& [who, security] : strangers) {
    const testing::ProbeResult got = testing::probe_control_plane(served.endpoint(), security, "rollout-0", kWait);
    EXPECT_FALSE(got.registered) << who;
    EXPECT_FALSE(got.store_set_acked) << who;
    EXPECT_EQ(got.messages_received, 0) << who;
  }
  EXPECT_FALSE(testing::probe_key_is_set(served.endpoint(), *worker, kWait)) << "a stranger's StoreSet landed";

  // The key holder gets everything through (the check above can fail).
  const testing::ProbeResult member = testing::probe_control_plane(served.endpoint(), *worker, "rollout-0", kWait);
  EXPECT_TRUE(member.registered);
  EXPECT_TRUE(member.store_set_acked);
  EXPECT_TRUE(testing::probe_key_is_set(served.endpoint(), *worker, kWait));
}

TEST(RunControlPlane, NoneWritesNoKeysAndAdmitsAnyone) {
  TempDir dir;
  auto bound = bind_run_control_plane(config_with(ControlPlaneSecurity::kNone), dir.path());
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  ServedPlane served(std::move(*bound));
  EXPECT_TRUE(served.plane().keys_path.empty());
  EXPECT_TRUE(control_key_flags(served.plane()).empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/keys"));
  const testing::ProbeResult got = testing::probe_control_plane(served.endpoint(), SecurityOptions{}, "anyone", kWait);
  EXPECT_TRUE(got.registered);
  EXPECT_TRUE(got.store_set_acked);
}

TEST(RunControlPlane, WorkerWithoutKeyFlagUsesNoSecurity) {
  auto none = worker_control_security("");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->mechanism, SecurityOptions::Mechanism::kNone);
}

TEST(RunControlPlane, UnreadableKeyFileIsNamedWithWhatToDo) {
  TempDir dir;
  auto missing = worker_control_security(dir.path() + "/keys/control_keys");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.path() + "/keys/control_keys"));
  EXPECT_THAT(missing.status().message(), HasSubstr("--control-keys"));

  auto bound = bind_run_control_plane(config_with(ControlPlaneSecurity::kCurve), dir.path());
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  ASSERT_EQ(::chmod(bound->keys_path.c_str(), 0644), 0);
  auto open = worker_control_security(bound->keys_path);
  ASSERT_FALSE(open.ok());
  EXPECT_THAT(open.status().message(), HasSubstr("chmod 600 " + bound->keys_path));
}

// The worker commands refuse to start, naming the file, before they build anything.
TEST(RunControlPlane, WorkerCommandsFailNamingTheKeyFile) {
  TempDir dir;
  const std::string keys = dir.path() + "/no/such/control_keys";
  const std::string config = std::string(RLRUN_SOURCE_DIR) + "/configs/tiny.yaml";
  for (const std::string command : {"rollout --index 0", "trainer --rank 0"}) {
    const testing::CliRun run = testing::run_rlrun(
        dir, str(command, " --orchestrator tcp://127.0.0.1:1 --config '", config, "' --control-keys '", keys, "'"));
    EXPECT_EQ(run.exit_code, 2) << command << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr(keys)) << command;
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
