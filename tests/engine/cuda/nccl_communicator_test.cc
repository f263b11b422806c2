// The NCCL communicator (engine/cuda/nccl_communicator.h). Rendezvous errors are tested
// everywhere (they happen before any device is touched); collectives need a GPU (label `gpu`)
// and skip with "no CUDA device" elsewhere: a one-rank group on device 0, and a two-rank group
// of threads when there are two devices.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#ifdef RLRUN_HAVE_CUDA
#include "engine/backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/nccl_communicator.h"
#include "engine/tensor.h"
#endif

namespace rlrun::engine {
namespace {

#ifndef RLRUN_HAVE_CUDA
TEST(NcclCommunicator, NeedsACudaBuild) { GTEST_SKIP() << "no CUDA device: this build has no CUDA backend"; }
#else

GroupOptions group(int rank, int size) {
  GroupOptions g;
  g.name = "nccl_test";
  g.rank = rank;
  g.size = size;
  g.timeout = std::chrono::milliseconds(300);
  return g;
}

TEST(NcclCommunicator, RankWithoutPublishedIdTimesOutNamingTheKey) {
  auto c = cuda::make_nccl_communicator(make_in_process_store(), group(1, 2), 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find("nccl_test/nccl_unique_id"), std::string::npos) << c.status().message();
}

TEST(NcclCommunicator, MalformedIdInTheStoreIsAProtocolError) {
  auto store = make_in_process_store();
  ASSERT_TRUE(store->set("nccl_test/nccl_unique_id", std::vector<char>(5, 'x')).ok());
  auto c = cuda::make_nccl_communicator(store, group(1, 2), 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kProtocol);
  EXPECT_NE(c.status().message().find("5 bytes"), std::string::npos) << c.status().message();
}

TEST(NcclCommunicator, BadRankIsInvalid) {
  auto c = cuda::make_nccl_communicator(make_in_process_store(), group(2, 2), 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

// Each rank: all-reduce, broadcast, all-gather and reduce-scatter of device buffers, then of host
// buffers (staged).
void run_rank(std::shared_ptr<RendezvousStore> store, int rank, int size, std::string* error) {
  auto backend = create_backend("cuda:" + std::to_string(rank));
  if (!backend.ok()) return void(*error = backend.status().to_string());
  Backend& b = **backend;
  GroupOptions g = group(rank, size);
  g.timeout = std::chrono::milliseconds(60000);
  auto comm = cuda::make_nccl_communicator(store, g, rank);
  if (!comm.ok()) return void(*error = comm.status().to_string());
  Communicator& c = **comm;
  const int64_t n = 1000;
  std::vector<float> mine(static_cast<size_t>(n * size));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(rank + 1) * static_cast<float>(i % 7);
  Tensor x = from_host(b, Shape{n * size}, mine), part = b.zeros(Shape{n}, DType::kF32);
  Tensor gathered = b.zeros(Shape{n * size}, DType::kF32);
  b.synchronize();
  const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
  auto expect_ok = [&](Status s, const char* what) {
    if (!s.ok() && error->empty()) *error = std::string(what) + ": " + s.to_string();
  };
  expect_ok(c.reduce_scatter_sum(x.data(), part.data(), n, CommDType::kF32), "reduce_scatter");
  expect_ok(c.all_reduce_sum(x.data(), static_cast<size_t>(n * size), CommDType::kF32), "all_reduce");
  expect_ok(c.all_gather(part.data(), gathered.data(), n, CommDType::kF32), "all_gather");
  expect_ok(c.barrier(), "barrier");
  const std::vector<float> sum = to_host_f32(x), slice = to_host_f32(part), all = to_host_f32(gathered);
  for (size_t i = 0; i < sum.size() && error->empty(); ++i) {
    const float want = ranks_sum * static_cast<float>(i % 7);
    if (sum[i] != want) *error = "all_reduce element " + std::to_string(i);
    if (all[i] != want) *error = "all_gather element " + std::to_string(i);
  }
  for (int64_t i = 0; i < n && error->empty(); ++i)
    if (slice[i] != ranks_sum * static_cast<float>((rank * n + i) % 7)) *error = "reduce_scatter element";
  Tensor bytes = b.zeros(Shape{16}, DType::kI32);
  if (rank == 0) b.copy_from_host(bytes, std::vector<int32_t>(16, 42).data(), 64);
  b.synchronize();
  expect_ok(c.broadcast(bytes.data(), 64, CommDType::kU8, 0), "broadcast");
  if (to_host_i32(bytes) != std::vector<int32_t>(16, 42) && error->empty()) *error = "broadcast contents";
  // Host buffers (a trainer's control values) are staged through the device.
  double host_value = rank + 1.0;
  std::vector<double> host_all(static_cast<size_t>(size));
  expect_ok(c.all_gather(&host_value, host_all.data(), sizeof(double), CommDType::kU8), "host all_gather");
  for (int r = 0; r < size && error->empty(); ++r)
    if (host_all[static_cast<size_t>(r)] != r + 1.0) *error = "host all_gather element " + std::to_string(r);
  int32_t head[2] = {rank == 0 ? 7 : 0, rank == 0 ? 9 : 0};
  expect_ok(c.broadcast(head, 2, CommDType::kI32, 0), "host broadcast");
  if ((head[0] != 7 || head[1] != 9) && error->empty()) *error = "host broadcast contents";
  float host_sum = 1.5f;
  expect_ok(c.all_reduce_sum(&host_sum, 1, CommDType::kF32), "host all_reduce");
  if (host_sum != 1.5f * static_cast<float>(size) && error->empty()) *error = "host all_reduce";
}

TEST(NcclCommunicator, CollectivesOnOneRank) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::string error;
  run_rank(make_in_process_store(), 0, 1, &error);
  EXPECT_EQ(error, "");
}

TEST(NcclCommunicator, CollectivesOnTwoDevices) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "no CUDA device pair (needs 2 GPUs)";
  auto store = make_in_process_store();
  std::string errors[2];
  std::thread t1([&] { run_rank(store, 1, 2, &errors[1]); });
  run_rank(store, 0, 2, &errors[0]);
  t1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}
#endif

}  // namespace
}  // namespace rlrun::engine
