// The CURVE transport (make_communicator with the run's keys): real sockets between threads of this
// process. It moves rank 0's bytes to every member, and nothing else: strangers on its port get
// nothing and put nothing in, a fake rank 0 feeds a member nothing, and a dead peer is an error
// within the bounds, never a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <numeric>
#include <thread>

#include "common/protocol/curve_keys.h"
#include "engine/comm/communicator.h"
#include "engine/comm/curve_wire.h"
#include "tests/common/eventually.h"
#include "tests/engine/comm/curve_probe.h"

namespace rlrun::engine {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

SecurityOptions worker_keys() {
  static const RunKeys keys = std::move(generate_run_keys()).value();
  return client_security(keys);
}

GroupOptions group(const std::string& name, int rank, int size, SecurityOptions security = worker_keys()) {
  GroupOptions o;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.timeout = 10s;
  o.collective_timeout = 5s;
  o.security = std::move(security);
  return o;
}

// Runs body(rank, comm) on `size` threads forming one group through an in-process store.
// private_dir: every rank's SecurityOptions::private_dir.
void run_group(int size, const std::function<void(int, Communicator&)>& body, const std::string& name = "g",
               const std::string& private_dir = "") {
  auto store = make_in_process_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GroupOptions o = group(name, r, size);
      o.security.private_dir = private_dir;
      auto comm = make_communicator(store, o);
      ASSERT_TRUE(comm.ok()) << comm.status().message();
      body(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

// Whether thread `tid` of this process is asleep (state S in /proc: blocked in a wait, as in poll).
bool thread_sleeps(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');  // "tid (name) S ...": the name may hold spaces
  return name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'S';
}

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(k * 131 + seed);
  return v;
}

TEST(CurveCommunicator, BroadcastMovesRankZerosBytesToEveryMember) {
  run_group(3, [](int rank, Communicator& comm) {
    EXPECT_EQ(comm.size(), 3);
    // Empty, small, and several chunks with a ragged end.
    for (size_t n : {size_t{0}, size_t{1000}, 2 * kCurveChunkBytes + 12345}) {
      std::vector<uint8_t> bytes = rank == 0 ? pattern(n, 7) : std::vector<uint8_t>(n, 0);
      ASSERT_TRUE(comm.broadcast(bytes.data(), n, CommDType::kU8, 0).ok());
      EXPECT_EQ(bytes, pattern(n, 7)) << "rank " << rank << ", " << n << " bytes";
    }
    std::vector<float> f(1000, rank == 0 ? 1.5f : 0.0f);
    ASSERT_TRUE(comm.broadcast(f.data(), f.size(), CommDType::kF32, 0).ok());
    EXPECT_EQ(f, std::vector<float>(1000, 1.5f));
    EXPECT_TRUE(comm.barrier().ok());
    EXPECT_FALSE(comm.broadcast(f.data(), 1, CommDType::kF32, 1).ok()) << "only rank 0 broadcasts";
    EXPECT_FALSE(comm.all_reduce_sum(f.data(), 1, CommDType::kF32).ok()) << "the transport carries broadcasts only";
  });
}

// Strangers reach rank 0's port before the real member joins, claiming its routing id and saying
// its hello: (a) without CURVE, (b) with a key pair of their own and the run's public key as the
// server's, (c) with no knowledge of the run's keys at all. None is admitted: the real member
// joins and gets the bytes, the strangers get not a single message.
TEST(CurveCommunicator, StrangersOnThePortNeitherReadNorInject) {
  auto store = make_in_process_store();
  const SecurityOptions stranger = client_security(std::move(generate_run_keys()).value());
  SecurityOptions knows_the_public_key = stranger;
  knows_the_public_key.server_public = worker_keys().client_public;
  const std::vector<SecurityOptions> strangers = {SecurityOptions{}, knows_the_public_key,
                                                  worker_client_security(stranger)};
  const std::vector<uint8_t> secret = pattern(3 * kCurveChunkBytes / 2, 3);
  std::jthread sender([&] {
    auto comm = make_communicator(store, group("w", 0, 2));
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    std::vector<uint8_t> bytes = secret;
    ASSERT_TRUE((*comm)->broadcast(bytes.data(), bytes.size(), CommDType::kU8, 0).ok());
  });
  auto endpoint = store->get("w/curve/endpoint", 10s);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().message();
  std::vector<std::future<int>> probes;
  std::vector<std::promise<void>> settled(strangers.size());  // rank 0 admitted or refused the stranger
  for (size_t i = 0; i < strangers.size(); ++i) {
    probes.push_back(std::async(std::launch::async, testing::probe_curve_transport,
                                std::string(endpoint->begin(), endpoint->end()), strangers[i], 1, 2000ms, &settled[i]));
  }
  for (size_t i = 0; i < settled.size(); ++i)  // the strangers go first: each tried before the member joins
    ASSERT_EQ(settled[i].get_future().wait_for(2000ms), std::future_status::ready)
        << "stranger " << i << " never heard from rank 0";
  auto member = make_communicator(store, group("w", 1, 2));
  ASSERT_TRUE(member.ok()) << member.status().message();
  std::vector<uint8_t> got(secret.size(), 0);
  ASSERT_TRUE((*member)->broadcast(got.data(), got.size(), CommDType::kU8, 0).ok());
  EXPECT_EQ(got, secret) << "the member loaded bytes rank 0 did not send";
  sender.join();
  for (size_t i = 0; i < probes.size(); ++i) EXPECT_EQ(probes[i].get(), 0) << "stranger " << i << " was sent messages";
}

// A member pointed at a fake rank 0 (a stranger's ROUTER, with CURVE keys of its own or none) fails
// to join, quickly and saying why; the fake never hears from it, so it cannot feed it anything.
TEST(CurveCommunicator, AMemberNeverTalksToAFakeRankZero) {
  const RunKeys fake_keys = std::move(generate_run_keys()).value();
  for (const bool fake_has_curve : {true, false}) {
    zmq::context_t context(1);
    zmq::socket_t fake(context, zmq::socket_type::router);
    fake.set(zmq::sockopt::linger, 0);
    ZapRegistrationPtr zap;
    if (fake_has_curve) {
      SecurityOptions s = server_security(fake_keys);
      s.client_public = worker_keys().client_public;  // it would even admit the real member's key
      auto registered = apply_curve_server(fake, context, s, "fake rank 0");
      ASSERT_TRUE(registered.ok()) << registered.status().message();
      zap = std::move(*registered);
    }
    fake.bind("tcp://127.0.0.1:0");
    const std::string endpoint = fake.get(zmq::sockopt::last_endpoint);
    auto store = make_in_process_store();
    ASSERT_TRUE(store->set("f/curve/endpoint", std::vector<char>(endpoint.begin(), endpoint.end())).ok());
    const auto start = Clock::now();
    auto member = make_communicator(store, group("f", 1, 2));
    ASSERT_FALSE(member.ok()) << "joined a fake rank 0 (CURVE: " << fake_has_curve << ")";
    EXPECT_LT(Clock::now() - start, 5s) << member.status().message();
    EXPECT_NE(member.status().message().find("rank 0"), std::string::npos) << member.status().message();
    zmq::pollitem_t item{fake.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 0ms);
    EXPECT_FALSE(item.revents & ZMQ_POLLIN) << "the member's bytes reached the fake rank 0";
    fake.close();
  }
}

// A member whose process died (its sockets closed) fails rank 0's broadcast at once, and rank 0
// tells the surviving members why, instead of leaving them to their timeout.
TEST(CurveCommunicator, DeadMemberFailsTheBroadcastAtOnceAndTheOthersHearWhy) {
  auto store = make_in_process_store();
  std::promise<void> left;
  std::jthread dying([&] {
    auto comm = make_communicator(store, group("d", 2, 3));
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    comm->reset();
    left.set_value();
  });
  std::promise<Status> survivor_status;
  std::jthread survivor([&] {
    auto comm = make_communicator(store, group("d", 1, 3));
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    std::vector<uint8_t> bytes(4 * kCurveChunkBytes);
    Status s = (*comm)->broadcast(bytes.data(), bytes.size(), CommDType::kU8, 0);
    // Rank 0 may queue every chunk for the dead member before its pipe is gone: then this member
    // gets all the bytes and acks, and the abort waits for its next collective.
    if (s.ok()) s = (*comm)->broadcast(bytes.data(), 1, CommDType::kU8, 0);
    survivor_status.set_value(s);
  });
  auto root = make_communicator(store, group("d", 0, 3));
  ASSERT_TRUE(root.ok()) << root.status().message();
  ASSERT_EQ(left.get_future().wait_for(10s), std::future_status::ready);
  std::vector<uint8_t> bytes(4 * kCurveChunkBytes, 1);
  const auto start = Clock::now();
  const Status s = (*root)->broadcast(bytes.data(), bytes.size(), CommDType::kU8, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(Clock::now() - start, 3s) << "the collective timeout (5 s) is not the way a death is found";
  EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
  const Status heard = survivor_status.get_future().get();
  EXPECT_FALSE(heard.ok());
  EXPECT_NE(heard.message().find("aborted"), std::string::npos) << heard.message();
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_FALSE((*root)->broadcast(bytes.data(), 1, CommDType::kU8, 0).ok()) << "a broken group stays broken";
  dying.join();
  survivor.join();
}

// Rank 0 that leaves (its process died) fails a waiting member at once.
TEST(CurveCommunicator, RankZeroThatLeavesFailsTheMembersAtOnce) {
  auto store = make_in_process_store();
  std::atomic<pid_t> member_thread{0};  // set as the member enters its broadcast
  std::jthread root([&] {
    auto comm = make_communicator(store, group("r", 0, 2));
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    ASSERT_TRUE(store->get("member-waits", 10s).ok());
    // Leaves once the member is inside its broadcast, asleep in its wait for rank 0's bytes.
    ASSERT_TRUE(testing::eventually([&] { return member_thread != 0 && thread_sleeps(member_thread); }, 5000ms))
        << "the member never waited in its broadcast";
  });
  auto member = make_communicator(store, group("r", 1, 2));
  ASSERT_TRUE(member.ok()) << member.status().message();
  ASSERT_TRUE(store->set("member-waits", {1}).ok());
  const auto start = Clock::now();
  std::vector<uint8_t> bytes(10);
  member_thread = static_cast<pid_t>(::gettid());
  const Status s = (*member)->broadcast(bytes.data(), bytes.size(), CommDType::kU8, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(Clock::now() - start, 3s) << s.message();
  EXPECT_NE(s.message().find("closed"), std::string::npos) << s.message();
  root.join();
}

// Test double: the run's store, except that it hands members a TCP endpoint nobody listens on, so
// a member that gets rank 0's bytes got them through the Unix socket.
class DeadTcpStore : public RendezvousStore {
 public:
  explicit DeadTcpStore(std::shared_ptr<RendezvousStore> inner) : inner_(std::move(inner)) {}
  Status set(const std::string& key, const std::vector<char>& value) override { return inner_->set(key, value); }
  Result<std::vector<char>> get(const std::string& key, std::chrono::milliseconds timeout) override {
    Result<std::vector<char>> value = inner_->get(key, timeout);
    if (!value.ok() || !key.ends_with("/curve/endpoint")) return value;
    const std::string dead = "tcp://127.0.0.1:9";  // discard: closed here
    return std::vector<char>(dead.begin(), dead.end());
  }

 private:
  std::shared_ptr<RendezvousStore> inner_;
};

std::string private_folder() {
  std::string pattern = (std::filesystem::temp_directory_path() / "rlrun-keysXXXXXX").string();
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);  // mode 0700
  return pattern;
}

int sockets_in(const std::string& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) n += entry.is_socket();
  return n;
}

GroupOptions in_folder(GroupOptions o, const std::string& dir) {
  o.security.private_dir = dir;
  return o;
}

// With the keys' folder as private_dir, a member on rank 0's host gets the bytes through a Unix
// socket there (its TCP endpoint is dead), a member without the folder still through TCP and
// CURVE, and rank 0's TCP port still admits no stranger. The socket's name goes once all joined.
TEST(CurveCommunicator, MembersOnRankZerosHostMeetInThePrivateFolder) {
  const std::string dir = private_folder();
  auto store = make_in_process_store();
  auto dead_tcp = std::make_shared<DeadTcpStore>(store);
  const std::vector<uint8_t> sent = pattern(5 * kCurveChunkBytes / 2, 5);
  std::promise<void> formed;
  std::jthread root([&] {
    auto comm = make_communicator(store, in_folder(group("p", 0, 3), dir));
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    formed.set_value();
    std::vector<uint8_t> bytes = sent;
    EXPECT_TRUE((*comm)->broadcast(bytes.data(), bytes.size(), CommDType::kU8, 0).ok());
    EXPECT_TRUE((*comm)->barrier().ok());
  });
  auto endpoint = store->get("p/curve/endpoint", 10s);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().message();
  EXPECT_EQ(sockets_in(dir), 1);
  auto stranger = std::async(std::launch::async, testing::probe_curve_transport,
                             std::string(endpoint->begin(), endpoint->end()), SecurityOptions{}, 2, 1000ms, nullptr);
  std::vector<uint8_t> got_local(sent.size()), got_tcp(sent.size());
  std::jthread over_tcp([&] {
    auto comm = make_communicator(store, group("p", 2, 3));
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    EXPECT_TRUE((*comm)->broadcast(got_tcp.data(), got_tcp.size(), CommDType::kU8, 0).ok());
    EXPECT_TRUE((*comm)->barrier().ok());
  });
  auto local = make_communicator(dead_tcp, in_folder(group("p", 1, 3), dir));
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_TRUE((*local)->broadcast(got_local.data(), got_local.size(), CommDType::kU8, 0).ok());
  EXPECT_TRUE((*local)->barrier().ok());
  over_tcp.join();
  root.join();
  EXPECT_EQ(got_local, sent);
  EXPECT_EQ(got_tcp, sent);
  EXPECT_EQ(stranger.get(), 0) << "the TCP port admitted a peer without the keys";
  EXPECT_EQ(sockets_in(dir), 0) << "rank 0's socket outlived the group's formation";
  std::filesystem::remove_all(dir);
}

// A folder others may open is not private: rank 0 binds no socket there and everyone uses TCP.
// A member whose own folder is another (another run's keys) does not use rank 0's socket.
TEST(CurveCommunicator, OnlyAFolderPrivateToBothSidesCarriesTheWeights) {
  const std::string dir = private_folder();
  ::chmod(dir.c_str(), 0755);
  run_group(2, [&](int rank, Communicator& comm) {
    if (rank == 0) {
      EXPECT_EQ(sockets_in(dir), 0) << "a socket in a folder others may open";
    }
    std::vector<uint8_t> bytes = rank == 0 ? pattern(1000, 1) : std::vector<uint8_t>(1000);
    EXPECT_TRUE(comm.broadcast(bytes.data(), bytes.size(), CommDType::kU8, 0).ok());
    EXPECT_EQ(bytes, pattern(1000, 1));
  }, "loose", dir);
  ::chmod(dir.c_str(), 0700);

  const std::string other = private_folder();
  auto store = make_in_process_store();
  std::jthread root([&] {
    GroupOptions o = in_folder(group("o", 0, 2), dir);
    o.timeout = 1s;
    EXPECT_FALSE(make_communicator(store, o).ok());
  });
  GroupOptions o = in_folder(group("o", 1, 2), other);
  o.timeout = 1s;
  EXPECT_FALSE(make_communicator(std::make_shared<DeadTcpStore>(store), o).ok())
      << "joined through a socket outside its own private folder";
  root.join();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(other);
}

TEST(CurveCommunicator, MissingMemberIsATimeoutNamingTheGroup) {
  GroupOptions o = group("lonely", 0, 2);
  o.timeout = 300ms;
  const auto start = Clock::now();
  auto comm = make_communicator(make_in_process_store(), o);
  ASSERT_FALSE(comm.ok());
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_NE(comm.status().message().find("lonely"), std::string::npos) << comm.status().message();
}

TEST(CurveCommunicator, DeviceGroupsCannotBeSecured) {
  GroupOptions o = group("nccl", 0, 1);
  o.placement = CommPlacement::kCuda;
  auto comm = make_communicator(make_in_process_store(), o);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("NCCL"), std::string::npos) << comm.status().message();
}

TEST(CurveWire, MalformedHeadersAreErrors) {
  std::vector<uint8_t> good = encode_curve_header({CurveKind::kData, 7, 4096});
  auto h = decode_curve_header(good);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->kind, CurveKind::kData);
  EXPECT_EQ(h->seq, 7u);
  EXPECT_EQ(h->offset, 4096u);
  std::vector<uint8_t> bad = good;
  bad[0] ^= 1;
  EXPECT_FALSE(decode_curve_header(bad).ok()) << "magic";
  bad = good;
  bad[4] = 99;
  EXPECT_FALSE(decode_curve_header(bad).ok()) << "kind";
  bad = good;
  bad[6] = 1;
  EXPECT_FALSE(decode_curve_header(bad).ok()) << "reserved";
  EXPECT_FALSE(decode_curve_header(std::span<const uint8_t>(good.data(), 10)).ok()) << "short";
}

}  // namespace
}  // namespace rlrun::engine
