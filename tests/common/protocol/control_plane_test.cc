// The control plane over real loopback TCP: register/ack, timeouts, several clients, a client
// vanishing, malformed peers, and a server process that must survive garbage on its port.
#include "common/protocol/control_plane.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq_addon.hpp>

#include "common/check.h"
#include "tests/common/eventually.h"
#include "tests/common/socket_events.h"

namespace rlrun {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

Result<std::unique_ptr<ControlServer>> bind_at(const std::string& endpoint) {
  ControlServer::Options options;
  options.bind_endpoint = endpoint;
  return ControlServer::bind(options);
}

std::unique_ptr<ControlServer> bind_loopback() {
  auto server = bind_at("tcp://127.0.0.1:0");
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return std::move(server).value();
}

std::unique_ptr<ControlClient> connect_to(const std::string& endpoint, const std::string& identity) {
  ControlClient::Options options;
  options.endpoint = endpoint;
  options.identity = identity;
  auto client = ControlClient::connect(options);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return std::move(client).value();
}

// Runs a ControlServer on its own thread (the socket is handed over once, then used only there).
class ServerThread {
 public:
  using Handler = std::function<void(ControlServer&, Incoming&)>;
  ServerThread(std::unique_ptr<ControlServer> server, Handler handler)
      : endpoint_(server->endpoint()), thread_([this, s = std::move(server), handler]() mutable {
          while (!stop_) {
            auto in = s->poll(20ms);
            if (in.ok()) handler(*s, *in);
          }
        }) {}
  ~ServerThread() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::atomic<bool> stop_{false};
  std::string endpoint_;
  std::thread thread_;
};

// Acks every Register with the next id; ignores everything else.
ServerThread::Handler acking_handler() {
  auto next_id = std::make_shared<uint32_t>(0);
  return [next_id](ControlServer& s, Incoming& in) {
    if (in.message.get<Register>()) {
      EXPECT_TRUE(s.send(in.peer, RegisterAck{++*next_id, "digest", {}}, in.message.correlation_id).ok());
    }
  };
}

TEST(ControlPlane, BindReportsTheActualEndpoint) {
  auto server = bind_loopback();
  EXPECT_THAT(server->endpoint(), StartsWith("tcp://127.0.0.1:"));
  EXPECT_GT(server->port(), 0);

  auto any = bind_at("tcp://*:*");
  ASSERT_TRUE(any.ok()) << any.status().to_string();
  EXPECT_GT((*any)->port(), 0);

  auto taken = bind_at("tcp://127.0.0.1:" + std::to_string(server->port()));
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(), HasSubstr("address in use"));

  auto bogus = bind_at("not-an-endpoint");
  ASSERT_FALSE(bogus.ok());
  EXPECT_EQ(bogus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bogus.status().message(), HasSubstr("not-an-endpoint"));
}

TEST(ControlPlane, RegisterIsAcked) {
  ServerThread server(bind_loopback(), acking_handler());
  auto client = connect_to(server.endpoint(), "trainer-0");
  auto reply = client->request(Register{Role::kTrainer, 0, "localhost", 123, {"cpu"}, ""}, 2000ms);
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  ASSERT_NE(reply->get<RegisterAck>(), nullptr);
  EXPECT_EQ(reply->get<RegisterAck>()->assigned_id, 1u);
  EXPECT_EQ(reply->correlation_id >> 63, 1u);
}

TEST(ControlPlane, RequestTimesOut) {
  ServerThread server(bind_loopback(), [](ControlServer&, Incoming&) {});  // never answers
  auto client = connect_to(server.endpoint(), "rollout-0");
  const auto start = std::chrono::steady_clock::now();
  auto reply = client->request(Heartbeat{}, 200ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kTimeout);
  EXPECT_THAT(reply.status().message(), HasSubstr("no reply to Heartbeat"));
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 1500ms);

  // No server at all: the client still connects (in the background) and the request times out.
  auto lonely = connect_to("tcp://127.0.0.1:1", "nobody");
  EXPECT_EQ(lonely->request(Heartbeat{}, 50ms).status().code(), StatusCode::kTimeout);
}

TEST(ControlPlane, SeveralClientsEachGetTheirOwnReply) {
  ServerThread server(bind_loopback(), acking_handler());
  std::vector<std::unique_ptr<ControlClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(connect_to(server.endpoint(), "worker-" + std::to_string(i)));
  std::set<uint32_t> ids;
  for (auto& client : clients) {
    auto reply = client->request(Register{}, 2000ms);
    ASSERT_TRUE(reply.ok()) << reply.status().to_string();
    ids.insert(reply->get<RegisterAck>()->assigned_id);
  }
  EXPECT_EQ(ids, (std::set<uint32_t>{1, 2, 3, 4}));
}

TEST(ControlPlane, UnrelatedMessagesAreKeptForReceive) {
  ServerThread server(bind_loopback(), [](ControlServer& s, Incoming& in) {
    EXPECT_TRUE(s.send(in.peer, Heartbeat{7}).ok());  // pushed before the reply
    EXPECT_TRUE(s.send(in.peer, RegisterAck{1, "", {}}, in.message.correlation_id).ok());
  });
  auto client = connect_to(server.endpoint(), "trainer-1");
  auto reply = client->request(Register{}, 2000ms);
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_NE(reply->get<RegisterAck>(), nullptr);
  auto pushed = client->receive(0ms);
  ASSERT_TRUE(pushed.ok()) << pushed.status().to_string();
  ASSERT_NE(pushed->get<Heartbeat>(), nullptr);
  EXPECT_EQ(pushed->get<Heartbeat>()->worker_id, 7u);
}

TEST(ControlPlane, ErrorReplyBecomesTheRequestsStatus) {
  ServerThread server(bind_loopback(), [](ControlServer& s, Incoming& in) {
    ErrorReply error{StatusCode::kInvalidArgument, uint16_t(in.message.kind()), "rank 9 is out of range"};
    EXPECT_TRUE(s.send(in.peer, error, in.message.correlation_id).ok());
  });
  auto client = connect_to(server.endpoint(), "trainer-9");
  auto reply = client->request(Register{}, 2000ms);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(reply.status().message(), HasSubstr("rank 9 is out of range"));
}

TEST(ControlPlane, VanishedClientBecomesUnreachableOthersStayServed) {
  auto server = bind_loopback();
  auto a = connect_to(server->endpoint(), "a");
  auto b = connect_to(server->endpoint(), "b");
  ASSERT_TRUE(a->send(Register{}).ok());
  ASSERT_TRUE(b->send(Register{}).ok());
  std::set<std::string> peers;
  for (int i = 0; i < 2; ++i) {
    auto in = server->poll(2000ms);
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    peers.insert(in->peer);
  }
  EXPECT_EQ(peers, (std::set<std::string>{"a", "b"}));

  a.reset();  // the process of "a" is gone: its TCP connection closes
  Status to_a;
  EXPECT_TRUE(testing::eventually([&] { return !(to_a = server->send("a", Shutdown{"x"})).ok(); }, 3s))
      << "the server still sends to a client whose connection closed";
  EXPECT_EQ(to_a.code(), StatusCode::kUnavailable);
  EXPECT_THAT(to_a.message(), HasSubstr("not connected"));

  ASSERT_TRUE(server->send("b", Shutdown{"done"}).ok());
  auto got = b->receive(2000ms);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->get<Shutdown>()->reason, "done");
}

TEST(ControlPlane, ClientReconnectsToARestartedServer) {
  std::string endpoint;
  auto client = std::unique_ptr<ControlClient>();
  {
    ServerThread first(bind_loopback(), acking_handler());
    endpoint = first.endpoint();
    client = connect_to(endpoint, "trainer-0");
    ASSERT_TRUE(client->request(Register{}, 2000ms).ok());
  }  // the server "restarts": same port, fresh state
  // libzmq closes the old listener asynchronously: the port may be busy for a moment.
  auto rebound = bind_at(endpoint);
  ASSERT_TRUE(rebound.ok() || testing::eventually([&] { return (rebound = bind_at(endpoint)).ok(); }, 2s))
      << rebound.status().to_string();
  ServerThread second(std::move(rebound).value(), acking_handler());
  // As documented, a request caught by the broken connection may be lost: retry on timeout.
  Result<Message> reply = timeout_error("not sent");
  for (int attempt = 0; attempt < 5 && !reply.ok(); ++attempt) {
    reply = client->request(Register{}, 1000ms);
    ASSERT_TRUE(reply.ok() || reply.status().code() == StatusCode::kTimeout) << reply.status().to_string();
  }
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_EQ(reply->get<RegisterAck>()->assigned_id, 1u) << "answered by the new server";
}

TEST(ControlPlane, SendingToAnUnknownPeerIsAnError) {
  auto server = bind_loopback();
  Status s = server->send("ghost", Shutdown{});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("ghost"));
}

TEST(ControlPlane, ArraysReceivedOverTcpAreNotCopied) {
  if (zmq_ctx_get(control_context().handle(), /*ZMQ_ZERO_COPY_RECV*/ 10) != 0)
    GTEST_SKIP() << "this libzmq cannot turn off its shared receive buffer; arrays are copied when misaligned";
  auto server = bind_loopback();
  auto client = connect_to(server->endpoint(), "rollout-0");
  for (size_t n : {9, 50, 1000, 5000}) {
    for (size_t error_len : {0, 1, 3}) {  // shifts the arrays' offsets within the TCP stream
      GenerateResult result;
      result.token_ids = std::vector<int32_t>(n, 11);
      result.logprobs = std::vector<float>(n, -0.25f);
      result.error = std::string(error_len, 'e');
      ASSERT_TRUE(client->send(result).ok());
      auto in = server->poll(2000ms);
      ASSERT_TRUE(in.ok()) << in.status().to_string();
      const GenerateResult& got = *in->message.get<GenerateResult>();
      EXPECT_TRUE(got.token_ids == result.token_ids && got.logprobs == result.logprobs);
      EXPECT_TRUE(got.token_ids.shares_frame()) << n << " tokens, error of " << error_len;
      EXPECT_TRUE(got.logprobs.shares_frame()) << n << " tokens, error of " << error_len;
    }
  }
}

// A raw DEALER that can send arbitrary frames.
zmq::socket_t raw_dealer(const std::string& endpoint, const std::string& identity) {
  zmq::socket_t socket(control_context(), zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::routing_id, identity);
  socket.connect(endpoint);
  return socket;
}

void send_raw(zmq::socket_t& socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq::message_t m(frames[i].data(), frames[i].size());
    ASSERT_TRUE(socket.send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none));
  }
}

std::string header_bytes(const Frames& frames) {
  return std::string(static_cast<const char*>(frames[0].data()), frames[0].size());
}

// Garbage that is valid ZMTP: each must be answered with an ErrorReply, not acted on.
std::vector<std::vector<std::string>> garbage_messages() {
  std::vector<std::vector<std::string>> out;
  out.push_back({"hello"});
  out.push_back({std::string(3000, '\xff'), "x", ""});
  std::string wrong_version = header_bytes(encode(Shutdown{"must not stop the server"}));
  wrong_version[4] = static_cast<char>(kProtocolVersion + 1);
  out.push_back({wrong_version});
  std::string too_many_arrays = header_bytes(encode(Register{}));
  too_many_arrays[16] = '\xe8';  // 1000 array frames announced
  too_many_arrays[17] = '\x03';
  out.push_back({too_many_arrays});
  out.push_back(std::vector<std::string>(kMaxFrames + 5, "frame"));  // over the frame limit
  return out;
}

TEST(ControlPlane, MalformedMessagesFromOnePeerDoNotDisturbOthers) {
  auto server = bind_loopback();
  zmq::socket_t attacker = raw_dealer(server->endpoint(), "attacker");
  auto good = connect_to(server->endpoint(), "good");
  const auto garbage = garbage_messages();
  for (const auto& message : garbage) send_raw(attacker, message);
  ASSERT_TRUE(good->send(Register{Role::kRollout, 2, "h", 1, {}, ""}).ok());

  auto in = server->poll(2000ms);  // skips every malformed message
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_EQ(in->peer, "good");
  EXPECT_EQ(in->message.get<Register>()->rank, 2);
  const auto give_up = std::chrono::steady_clock::now() + 3s;
  while (server->malformed_count() < garbage.size() && std::chrono::steady_clock::now() < give_up)
    (void)server->poll(20ms);
  EXPECT_EQ(server->malformed_count(), garbage.size());

  // The attacker got one ErrorReply per message, naming the problem.
  for (size_t i = 0; i < garbage.size(); ++i) {
    zmq::pollitem_t item{attacker.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, 2000ms), 1);
    Frames frames;
    ASSERT_TRUE(zmq::recv_multipart(attacker, std::back_inserter(frames)));
    auto reply = decode(std::move(frames));
    ASSERT_TRUE(reply.ok()) << reply.status().to_string();
    ASSERT_NE(reply->get<ErrorReply>(), nullptr);
    EXPECT_EQ(reply->get<ErrorReply>()->code, StatusCode::kProtocol);
  }
}

TEST(ControlPlane, AFloodOfGarbageDoesNotHoldPollPastItsTimeout) {
  ControlServer::Options options;
  options.bind_endpoint = "tcp://127.0.0.1:0";
  options.reply_to_malformed = false;
  auto server = std::move(ControlServer::bind(options)).value();
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::thread flood([&] {  // at most 3 s of garbage, as fast as it goes
    zmq::socket_t attacker = raw_dealer(server->endpoint(), "flood");
    attacker.set(zmq::sockopt::sndtimeo, 50);
    const auto give_up = std::chrono::steady_clock::now() + 3s;
    while (!stop && std::chrono::steady_clock::now() < give_up) sent += attacker.send(zmq::str_buffer("junk")) ? 1 : 0;
  });
  ASSERT_TRUE(testing::eventually([&] { return sent >= 2000; }, 3s, 1ms)) << "garbage is queued and keeps coming";
  const auto start = std::chrono::steady_clock::now();
  auto in = server->poll(100ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  stop = true;
  flood.join();
  EXPECT_EQ(in.status().code(), StatusCode::kTimeout);
  EXPECT_LT(elapsed, 1500ms);
}

TEST(ControlPlane, FramesOverMaxFrameBytesNeverReachTheServer) {
  ControlServer::Options options;
  options.socket.max_frame_bytes = 1024;
  auto bound = ControlServer::bind(options);
  ASSERT_TRUE(bound.ok()) << bound.status().to_string();
  auto& server = *bound;
  zmq::socket_t big = raw_dealer(server->endpoint(), "big");
  send_raw(big, {std::string(4096, 'x')});  // libzmq drops this connection (ZMQ_MAXMSGSIZE)
  auto good = connect_to(server->endpoint(), "good");
  ASSERT_TRUE(good->send(Heartbeat{3}).ok());
  auto in = server->poll(2000ms);
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_EQ(in->peer, "good");
  EXPECT_EQ(server->poll(100ms).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(server->malformed_count(), 0u) << "the oversized frame was delivered, so it was allocated";
}

// ---------------------------------------------------------------- a separate server process

// The test double process (tests/common/protocol/control_server_double.cc); killed if the test fails.
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& max_frame_bytes) {
    int out[2];
    RLRUN_CHECK(pipe(out) == 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execl(CONTROL_SERVER_DOUBLE, CONTROL_SERVER_DOUBLE, max_frame_bytes.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    endpoint_ = read_endpoint(out[0]);
    close(out[0]);
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& endpoint() const { return endpoint_; }
  bool alive() { return waitpid(pid_, nullptr, WNOHANG) == 0; }
  // Exit status, or -1 if it did not exit within `timeout`.
  int wait_exit(std::chrono::milliseconds timeout) {
    int status = 0;
    exited_ = testing::eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!exited_) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  static std::string read_endpoint(int fd) {  // "ENDPOINT tcp://...\n" within 10 s
    std::string line;
    char c;
    pollfd p{fd, POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&p, 1, 10000) == 1 && read(fd, &c, 1) == 1) line += c;
    const std::string prefix = "ENDPOINT ";
    if (line.rfind(prefix, 0) != 0) return "";
    return line.substr(prefix.size(), line.size() - prefix.size() - 1);
  }

  pid_t pid_ = -1;
  bool exited_ = false;
  std::string endpoint_;
};

// Connects a plain TCP socket to the port and writes `bytes` (no ZMTP at all).
void send_tcp_garbage(int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  (void)!write(fd, bytes.data(), bytes.size());  // the server may hang up first: fine
  close(fd);
}

TEST(ControlPlaneProcess, ServerSurvivesGarbageAndStillAnswers) {
  constexpr int kMaxFrame = 1 << 20;  // the double drops peers sending bigger frames
  ServerProcess child(std::to_string(kMaxFrame));
  ASSERT_THAT(child.endpoint(), StartsWith("tcp://127.0.0.1:"));
  const int port = std::stoi(child.endpoint().substr(child.endpoint().rfind(':') + 1));

  // (a) raw bytes, not ZMTP: random noise, an HTTP request, a ZMTP-like greeting claiming a huge frame.
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    std::string noise(1 + rng() % 8192, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    send_tcp_garbage(port, noise);
  }
  send_tcp_garbage(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  send_tcp_garbage(port, std::string("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00NULL", 14) + std::string(80, '\0') +
                             std::string("\x06\xff\xff\xff\xff\xff\xff\xff\xff", 9));

  // (b) valid ZMTP carrying garbage frames, a wrong version, too many frames; each gets an ErrorReply.
  zmq::socket_t attacker = raw_dealer(child.endpoint(), "attacker");
  const auto garbage = garbage_messages();
  for (const auto& message : garbage) send_raw(attacker, message);
  for (size_t i = 0; i < garbage.size(); ++i) {
    zmq::pollitem_t item{attacker.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, 3000ms), 1) << "no ErrorReply for garbage message " << i;
    Frames frames;
    ASSERT_TRUE(zmq::recv_multipart(attacker, std::back_inserter(frames)));
    auto reply = decode(std::move(frames));
    ASSERT_TRUE(reply.ok() && reply->get<ErrorReply>()) << "reply to garbage message " << i;
  }
  // ... and an oversized frame, which libzmq refuses (ZMQ_MAXMSGSIZE) by dropping that connection.
  zmq::socket_t big(control_context(), zmq::socket_type::dealer);
  big.set(zmq::sockopt::linger, 0);
  big.set(zmq::sockopt::routing_id, "big");
  testing::SocketEvents big_events(control_context(), big, ZMQ_EVENT_DISCONNECTED);
  big.connect(child.endpoint());
  send_raw(big, {std::string(2 * kMaxFrame, 'x')});
  ASSERT_EQ(big_events.wait(5000ms), ZMQ_EVENT_DISCONNECTED) << "the oversized frame did not cost its connection";
  ASSERT_TRUE(child.alive());

  // (c) a valid Register is still answered, and the double counted the malformed messages: at
  // least the ZMTP ones (libzmq may also read raw noise as legacy ZMTP/1.0 frames, which then
  // fail to decode and count too).
  auto client = connect_to(child.endpoint(), "rollout-0");
  auto ack = client->request(Register{Role::kRollout, 0, "localhost", 1, {"cpu"}, ""}, 3000ms);
  ASSERT_TRUE(ack.ok()) << ack.status().to_string();
  ASSERT_NE(ack->get<RegisterAck>(), nullptr);
  EXPECT_GE(std::stoul(ack->get<RegisterAck>()->rendezvous.at("malformed")), garbage.size());
  EXPECT_TRUE(child.alive());

  // Arrays survive the trip out and back (the double re-sends the frames it decoded).
  GenerateResult result;
  result.request_id = 5;
  result.token_ids = std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  result.logprobs = std::vector<float>(12, -0.125f);
  auto echoed = client->request(result, 3000ms);
  ASSERT_TRUE(echoed.ok()) << echoed.status().to_string();
  ASSERT_NE(echoed->get<GenerateResult>(), nullptr);
  EXPECT_TRUE(*echoed->get<GenerateResult>() == result);

  // Clean shutdown: the double exits once its reply is acknowledged.
  auto bye = client->request(Shutdown{"test done"}, 3000ms);
  ASSERT_TRUE(bye.ok()) << bye.status().to_string();
  EXPECT_EQ(bye->get<Shutdown>()->reason, "bye");
  ASSERT_TRUE(client->send(Shutdown{"bye received"}).ok());
  EXPECT_EQ(child.wait_exit(5000ms), 0);
}

}  // namespace
}  // namespace rlrun
