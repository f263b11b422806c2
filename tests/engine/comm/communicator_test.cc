// Gloo communicator (through make_communicator, placement kHost): real TCP connections between threads of this process.
#include "engine/comm/communicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <thread>

namespace rlrun::engine {
namespace {

using namespace std::chrono_literals;

// Runs body(rank, comm) on `size` threads sharing one in-process store.
void run_group(int size, const std::function<void(int, Communicator&)>& body, std::string name = "g") {
  auto store = make_in_process_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GroupOptions opts;
      opts.name = name;
      opts.rank = r;
      opts.size = size;
      opts.timeout = 10s;
      auto comm = make_communicator(store, opts);  // placement kHost: Gloo
      ASSERT_TRUE(comm.ok()) << comm.status().message();
      body(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicator, AllReduceSumsFloatsAndInts) {
  run_group(3, [](int rank, Communicator& comm) {
    EXPECT_EQ(comm.size(), 3);
    EXPECT_EQ(comm.rank(), rank);
    std::vector<float> f = {1.0f * rank, 2.0f, -0.5f * rank};
    ASSERT_TRUE(comm.all_reduce_sum(f.data(), f.size(), CommDType::kF32).ok());
    EXPECT_FLOAT_EQ(f[0], 0 + 1 + 2);
    EXPECT_FLOAT_EQ(f[1], 6.0f);
    EXPECT_FLOAT_EQ(f[2], -1.5f);
    std::vector<int32_t> i = {rank + 1};
    ASSERT_TRUE(comm.all_reduce_sum(i.data(), 1, CommDType::kI32).ok());
    EXPECT_EQ(i[0], 6);
  });
}

TEST(GlooCommunicator, BroadcastCopiesRootBytes) {
  run_group(3, [](int rank, Communicator& comm) {
    std::vector<uint8_t> bytes(1000, static_cast<uint8_t>(rank));
    if (rank == 1) std::iota(bytes.begin(), bytes.end(), 0);
    ASSERT_TRUE(comm.broadcast(bytes.data(), bytes.size(), CommDType::kU8, /*root=*/1).ok());
    for (size_t k = 0; k < bytes.size(); ++k) ASSERT_EQ(bytes[k], static_cast<uint8_t>(k));
  });
}

TEST(GlooCommunicator, ReduceScatterThenAllGatherEqualsAllReduce) {
  constexpr size_t kPerRank = 5;
  run_group(2, [](int rank, Communicator& comm) {
    std::vector<float> in(2 * kPerRank);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k * (rank + 1));
    std::vector<float> shard(kPerRank);
    ASSERT_TRUE(comm.reduce_scatter_sum(in.data(), shard.data(), kPerRank, CommDType::kF32).ok());
    for (size_t k = 0; k < kPerRank; ++k) EXPECT_FLOAT_EQ(shard[k], 3.0f * (rank * kPerRank + k));
    std::vector<float> gathered(2 * kPerRank);
    ASSERT_TRUE(comm.all_gather(shard.data(), gathered.data(), kPerRank, CommDType::kF32).ok());
    for (size_t k = 0; k < gathered.size(); ++k) EXPECT_FLOAT_EQ(gathered[k], 3.0f * k);
    EXPECT_TRUE(comm.barrier().ok());
  });
}

TEST(GlooCommunicator, ReduceScatterPlacesEveryShardForAnyGroupSize) {
  for (int size : {3, 4, 5}) {
    constexpr size_t kPerRank = 3;
    run_group(size, [size](int rank, Communicator& comm) {
      std::vector<float> in(size * kPerRank);
      for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k + 100 * rank);
      std::vector<float> shard(kPerRank);
      ASSERT_TRUE(comm.reduce_scatter_sum(in.data(), shard.data(), kPerRank, CommDType::kF32).ok());
      const float rank_sum = 100.0f * size * (size - 1) / 2;
      for (size_t k = 0; k < kPerRank; ++k) {
        EXPECT_FLOAT_EQ(shard[k], size * static_cast<float>(rank * kPerRank + k) + rank_sum)
            << "size " << size << " rank " << rank << " element " << k;
      }
    }, "rs" + std::to_string(size));
  }
}

TEST(GlooCommunicator, MissingPeerIsATimeoutErrorNotAHang) {
  auto store = make_in_process_store();
  GroupOptions opts;
  opts.name = "lonely";
  opts.rank = 0;
  opts.size = 2;  // rank 1 never comes
  opts.timeout = 300ms;
  auto comm = make_gloo_communicator(store, opts);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("lonely"), std::string::npos) << comm.status().message();
}

TEST(GlooCommunicator, DeadPeerMidRunIsAnErrorNotAHang) {
  auto store = make_in_process_store();
  std::thread peer([&] {
    GroupOptions opts;
    opts.name = "dying";
    opts.rank = 1;
    opts.size = 2;
    opts.timeout = 5s;
    auto comm = make_gloo_communicator(store, opts);
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    // Leave only once rank 0 has finished connecting too; then the communicator and its sockets
    // are destroyed while rank 0 still expects a collective.
    ASSERT_TRUE(store->get("rank0_connected", 5s).ok());
  });
  GroupOptions opts;
  opts.name = "dying";
  opts.rank = 0;
  opts.size = 2;
  opts.timeout = 2s;
  auto comm = make_gloo_communicator(store, opts);
  ASSERT_TRUE(store->set("rank0_connected", {1}).ok());
  peer.join();
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  std::vector<float> data(1 << 16, 1.0f);
  Status s = (*comm)->all_reduce_sum(data.data(), data.size(), CommDType::kF32);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s.message();
}

TEST(GlooCommunicator, BadRankIsAnError) {
  GroupOptions opts;
  opts.rank = 2;
  opts.size = 2;
  auto comm = make_gloo_communicator(make_in_process_store(), opts);
  EXPECT_FALSE(comm.ok());
}

}  // namespace
}  // namespace rlrun::engine
