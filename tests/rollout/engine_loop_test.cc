// EngineLoop: requests from several threads are batched by one engine thread; stop() cancels
// what is unfinished; a full queue and a stopped loop refuse requests with a Status.
#include "rollout/engine_loop.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "tests/rollout/rollout_test_util.h"

namespace rlrun::rollout {
namespace {

using testing::greedy_request;
using testing::prompt_of;

// Records what the engine thread hands over.
class RecordingSink : public GenerationSink {
 public:
  void on_tokens(std::span<const StreamedToken> tokens) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const StreamedToken& t : tokens) streamed_[t.request_id].push_back(t.token);
  }
  void on_finished(SampleOutput out) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out.finish_reason == FinishReason::kCancelled) ++cancelled_;
      finished_[out.request_id] = std::move(out);
    }
    cv_.notify_all();
  }
  // Waits (at most 30 s) until `n` samples finished.
  std::map<uint64_t, SampleOutput> wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return finished_.size() >= n; });
    return finished_;
  }
  int cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  std::map<uint64_t, std::vector<int32_t>> streamed() {
    std::lock_guard<std::mutex> lock(mu_);
    return streamed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, SampleOutput> finished_;
  std::map<uint64_t, std::vector<int32_t>> streamed_;
  int cancelled_ = 0;
};

TEST(EngineLoop, RequestsFromManyThreadsAreBatchedAndMatchTheSchedulerAlone) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto alone = testing::make_scheduler(*model, testing::small_options(256));
  for (uint64_t i = 0; i < 8; ++i) alone->add(greedy_request(i, prompt_of(4 + i, 70 + i), 20));
  const auto expected = testing::run_to_end(*alone);

  auto scheduler = testing::make_scheduler(*model, testing::small_options(256));
  EngineLoop loop(*scheduler, EngineLoopOptions{});
  auto sink = std::make_shared<RecordingSink>();
  std::vector<std::thread> clients;
  for (uint64_t i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      GenerationRequest r = greedy_request(i, prompt_of(4 + i, 70 + i), 20);
      r.stream = true;
      EXPECT_TRUE(loop.submit(std::move(r), sink).ok());
    });
  }
  for (std::thread& t : clients) t.join();
  const auto got = sink->wait_for(8);
  ASSERT_EQ(got.size(), 8u);
  for (const auto& [id, out] : got) {
    EXPECT_EQ(out.tokens, expected.at({id, 0}).tokens) << "request " << id;
    EXPECT_EQ(sink->streamed()[id], out.tokens) << "request " << id;
  }
  EXPECT_EQ(loop.stats().requests, 8);
  EXPECT_EQ(loop.stats().unfinished, 0);
  EXPECT_GE(loop.stats().scheduler.max_running, 2) << "the requests were served one at a time";
}

TEST(EngineLoop, StopCancelsTheUnfinishedAndRefusesNewRequests) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto scheduler = testing::make_scheduler(*model, testing::small_options(256, 4, 48));
  EngineLoopOptions options;
  options.max_requests = 3;
  EngineLoop loop(*scheduler, options);
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest bad = greedy_request(1, {}, 5);  // refused by the scheduler: an error output
  ASSERT_TRUE(loop.submit(std::move(bad), sink).ok());
  EXPECT_EQ(sink->wait_for(1).at(1).finish_reason, FinishReason::kError);
  for (uint64_t i = 2; i <= 4; ++i) {
    GenerationRequest r = greedy_request(i, prompt_of(4, 90 + i), 0);  // until max_model_len
    r.num_samples = 50;
    r.first_sample_index = 0;
    ASSERT_TRUE(loop.submit(std::move(r), sink).ok());
  }
  const Status full = loop.submit(greedy_request(9, {1, 2}, 5), sink);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.to_string();
  loop.stop();
  EXPECT_GT(sink->cancelled(), 0) << "stop() let 150 samples run to their end";
  EXPECT_EQ(loop.submit(greedy_request(10, {1, 2}, 5), sink).code(), StatusCode::kUnavailable);
  EXPECT_EQ(loop.stats().unfinished, 0);
  EXPECT_EQ(scheduler->has_unfinished(), false);
}

}  // namespace
}  // namespace rlrun::rollout
