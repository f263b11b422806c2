// CURVE on the control plane over loopback: the run's client registers; a plain client, a client
// with another valid key pair, and a client with the right server key but a foreign client key
// get nothing through. Plus the key file: round trip, mode check, and no secret in any log line.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "common/observe/log.h"
#include "common/protocol/control_plane.h"
#include "common/protocol/curve_keys.h"

namespace rlrun {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kTimeout = 300ms;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rlrun-curve-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

RunKeys fresh_keys() {
  auto keys = generate_run_keys();
  EXPECT_TRUE(keys.ok()) << keys.status().to_string();
  return std::move(keys).value();
}

// A CURVE server with `keys` polled on its own thread; acks every Register and counts every
// message that got through.
class CurveServer {
 public:
  explicit CurveServer(const RunKeys& keys) {
    ControlServer::Options options;
    options.socket.security = server_security(keys);
    auto server = ControlServer::bind(options);
    EXPECT_TRUE(server.ok()) << server.status().to_string();
    endpoint_ = (*server)->endpoint();
    thread_ = std::thread([this, s = std::move(server).value()] {
      while (!stop_) {
        auto in = s->poll(20ms);
        if (!in.ok()) continue;
        ++received_;
        if (in->message.get<Register>()) (void)s->send(in->peer, RegisterAck{7, "digest", {}}, in->message.correlation_id);
      }
    });
  }
  ~CurveServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  int received() const { return received_; }

 private:
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> received_{0};
  std::thread thread_;
};

std::unique_ptr<ControlClient> connect_with(const std::string& endpoint, const SecurityOptions& security) {
  ControlClient::Options options;
  options.endpoint = endpoint;
  options.identity = "trainer-0";
  options.socket.security = security;
  auto client = ControlClient::connect(options);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return std::move(client).value();
}

Result<Message> register_with(const std::string& endpoint, const SecurityOptions& security) {
  return connect_with(endpoint, security)->request(Register{Role::kTrainer, 0, "localhost", 1, {"cpu"}, ""}, kTimeout);
}

TEST(ControlPlaneCurve, LibzmqHasCurve) { ASSERT_TRUE(check_curve_available().ok()); }

TEST(ControlPlaneCurve, RunClientRegisters) {
  const RunKeys keys = fresh_keys();
  CurveServer server(keys);
  auto reply = register_with(server.endpoint(), client_security(keys));
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  ASSERT_NE(reply->get<RegisterAck>(), nullptr);
  EXPECT_EQ(reply->get<RegisterAck>()->assigned_id, 7u);
  EXPECT_EQ(server.received(), 1);
}

TEST(ControlPlaneCurve, StrangersGetNothingThrough) {
  const RunKeys keys = fresh_keys();
  const RunKeys other = fresh_keys();
  CurveServer server(keys);

  SecurityOptions wrong_client = client_security(keys);  // right server key, foreign client pair
  wrong_client.client_public = other.client_public;
  wrong_client.client_secret = other.client_secret;
  const std::pair<const char*, SecurityOptions> strangers[] = {
      {"plain (no CURVE)", SecurityOptions{}},
      {"another run's keys", client_security(other)},
      {"foreign client key", wrong_client},
  };
  for (const auto& [name, security] : strangers) {
    auto reply = register_with(server.endpoint(), security);
    ASSERT_FALSE(reply.ok()) << name;
    EXPECT_EQ(reply.status().code(), StatusCode::kTimeout) << name << ": " << reply.status().to_string();
  }
  EXPECT_EQ(server.received(), 0);

  // The server still serves its own run afterwards.
  auto reply = register_with(server.endpoint(), client_security(keys));
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_EQ(server.received(), 1);
}

TEST(ControlPlaneCurve, TwoServersInOneContextAdmitOnlyTheirOwnClient) {
  const RunKeys a = fresh_keys(), b = fresh_keys();
  CurveServer server_a(a), server_b(b);
  SecurityOptions b_client_to_a = client_security(a);  // knows a's server key, holds b's client pair
  b_client_to_a.client_public = b.client_public;
  b_client_to_a.client_secret = b.client_secret;
  EXPECT_TRUE(register_with(server_a.endpoint(), client_security(a)).ok());
  EXPECT_TRUE(register_with(server_b.endpoint(), client_security(b)).ok());
  EXPECT_EQ(register_with(server_a.endpoint(), b_client_to_a).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(server_a.received(), 1);
}

TEST(ControlPlaneCurve, PlainServersInTheSameContextStillWork) {
  const RunKeys keys = fresh_keys();
  CurveServer curve(keys);  // its ZAP handler now answers for the whole process context
  auto plain = ControlServer::bind(ControlServer::Options{});
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto client = connect_with((*plain)->endpoint(), SecurityOptions{});
  ASSERT_TRUE(client->send(Heartbeat{}).ok());
  auto in = (*plain)->poll(2000ms);
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_NE(in->message.get<Heartbeat>(), nullptr);
}

TEST(ControlPlaneCurve, BadKeysAreRefusedUpFront) {
  const RunKeys keys = fresh_keys(), other = fresh_keys();
  ControlServer::Options options;
  options.socket.security = server_security(keys);
  options.socket.security.server_secret = other.server_secret;  // not the pair of server_public
  auto server = ControlServer::bind(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("does not belong to the secret key"));
  EXPECT_THAT(server.status().message(), Not(HasSubstr(other.server_secret)));

  ControlClient::Options client;
  client.endpoint = "tcp://127.0.0.1:1";
  client.socket.security = client_security(keys);
  client.socket.security.server_public = "too short";
  auto connected = ControlClient::connect(client);
  ASSERT_FALSE(connected.ok());
  EXPECT_THAT(connected.status().message(), HasSubstr("server public key"));
}

TEST(ControlPlaneCurve, KeyFileRoundTrip) {
  TempDir dir;
  auto path = write_run_keys(dir.path());
  ASSERT_TRUE(path.ok()) << path.status().to_string();
  EXPECT_EQ(*path, dir.path() + "/" + kRunKeysFileName);
  struct stat info {};
  ASSERT_EQ(::stat(path->c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  auto keys = read_run_keys(*path);
  ASSERT_TRUE(keys.ok()) << keys.status().to_string();
  EXPECT_TRUE(check_key_pair(keys->server_public, keys->server_secret, "server").ok());
  EXPECT_TRUE(check_key_pair(keys->client_public, keys->client_secret, "client").ok());
  EXPECT_NE(keys->server_public, keys->client_public);

  // The keys read back work end to end.
  CurveServer server(*keys);
  EXPECT_TRUE(register_with(server.endpoint(), client_security(*keys)).ok());
}

TEST(ControlPlaneCurve, KeyFileModeIsChecked) {
  TempDir dir;
  auto path = write_run_keys(dir.path());
  ASSERT_TRUE(path.ok()) << path.status().to_string();
  for (mode_t mode : {0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(path->c_str(), mode), 0);
    auto keys = read_run_keys(*path);
    ASSERT_FALSE(keys.ok()) << std::oct << mode;
    EXPECT_THAT(keys.status().message(), HasSubstr(*path));
    EXPECT_THAT(keys.status().message(), HasSubstr("chmod 600 " + *path));
  }
  ASSERT_EQ(::chmod(path->c_str(), 0400), 0);
  EXPECT_TRUE(read_run_keys(*path).ok());

  auto missing = read_run_keys(dir.path() + "/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ControlPlaneCurve, KeyFileContentIsValidated) {
  TempDir dir;
  const std::string path = dir.path() + "/keys";
  const RunKeys keys = fresh_keys(), other = fresh_keys();
  auto write = [&](const std::string& text) { ASSERT_TRUE(write_file_atomic(path, text, 0600).ok()); };

  write(str("server_public ", keys.server_public, "\nserver_secret ", keys.server_secret, "\n"));
  EXPECT_THAT(read_run_keys(path).status().message(), HasSubstr("has no client_public"));

  write(str("server_public ", keys.server_public, "\nserver_secret ", keys.server_secret, "\nclient_public ",
            keys.client_public, "\nclient_secret ", other.client_secret, "\n"));
  auto mismatched = read_run_keys(path);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("client key pair"));
  EXPECT_THAT(mismatched.status().message(), Not(HasSubstr(other.client_secret)));

  write("password hunter2\n");
  auto unknown = read_run_keys(path);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown key name"));
  EXPECT_THAT(unknown.status().message(), Not(HasSubstr("hunter2")));
}

TEST(ControlPlaneCurve, SecretsNeverReachTheLog) {
  TempDir dir;
  ::testing::internal::CaptureStderr();
  std::string logged;
  RunKeys keys;
  {
    auto path = write_run_keys(dir.path());
    ASSERT_TRUE(path.ok());
    keys = read_run_keys(*path).value();
    CurveServer server(keys);
    EXPECT_TRUE(register_with(server.endpoint(), client_security(keys)).ok());
    SecurityOptions foreign = client_security(fresh_keys());  // passes the handshake, fails ZAP
    foreign.server_public = keys.server_public;
    EXPECT_FALSE(register_with(server.endpoint(), foreign).ok());  // logs a rejection
  }
  logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, HasSubstr(key_fingerprint(keys.server_public)));  // public fingerprints are logged
  EXPECT_THAT(logged, HasSubstr("rejected"));
  EXPECT_THAT(logged, Not(HasSubstr(keys.server_secret)));
  EXPECT_THAT(logged, Not(HasSubstr(keys.client_secret)));
  EXPECT_THAT(logged, Not(HasSubstr(keys.server_secret.substr(0, 8))));
  EXPECT_THAT(logged, Not(HasSubstr(keys.client_secret.substr(0, 8))));
}

}  // namespace
}  // namespace rlrun
