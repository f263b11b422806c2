// Dispatcher: work goes to the serving worker with most free lanes; a group is one request, or one
// per sample with individual lanes; results are routed by request id and unknown or repeated ones
// are ignored; a dead worker's unanswered samples go back with their ids and are sent first;
// off-policy requests are cancelled once; evaluation goes out in a window per worker; a batch is
// taken whole, in order, or not at all.
#include "orchestrator/run/samples/dispatcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace rlrun::orchestrator {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using Kind = Dispatcher::Routed::Kind;

Problem problem(const std::string& prompt) {
  Problem p;
  p.prompt = prompt;
  return p;
}

struct Sent {
  int worker;
  GenerateRequest request;
};

// Two serving rollout workers of two lanes each, and a trainer (never given work).
struct DispatcherTest : ::testing::Test {
  std::vector<WorkerSlot> workers{slot(Role::kTrainer, 0), slot(Role::kRollout, 0), slot(Role::kRollout, 1)};
  std::vector<Sent> sent;

  static WorkerSlot slot(Role role, int rank) {
    WorkerSlot w;
    w.name = worker_name(role, rank);
    w.role = role;
    w.rank = rank;
    w.state = WorkerState::kReady;
    return w;
  }
  Dispatcher make(bool individual_lanes, uint32_t group_size = 4) {
    DispatchOptions o;
    o.group_size = group_size;
    o.individual_lanes = individual_lanes;
    o.lanes_per_worker = 2;
    o.max_tokens = 8;
    o.seed = 7;
    o.stop_ids = {2};
    return Dispatcher(o, workers, [this](int worker, const GenerateRequest& r) {
      sent.push_back({worker, r});
      return Status();
    });
  }
  static GenerateResult result(uint64_t request, uint32_t index, FinishReason reason = FinishReason::kStop) {
    GenerateResult r;
    r.request_id = request;
    r.sample_index = index;
    r.finish_reason = reason;
    return r;
  }
};

TEST_F(DispatcherTest, AGroupIsOneRequestToTheServingWorkerWithMostFreeLanes) {
  Dispatcher d = make(false);
  EXPECT_EQ(d.free_worker(), 1) << "the first of two equally free rollout workers, never the trainer";
  const uint64_t g0 = d.admit(problem("p0"), {5, 6}, 3);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].worker, 1);
  EXPECT_EQ(sent[0].request.num_samples, 4u);
  EXPECT_EQ(sent[0].request.first_sample_index, 0u);
  EXPECT_EQ(sent[0].request.seed, 7u * 1000003u + sent[0].request.request_id);
  EXPECT_EQ(d.lanes_used(1), 1);
  EXPECT_EQ(d.free_worker(), 2) << "worker 2 has more free lanes now";
  d.admit(problem("p1"), {5}, 3);
  EXPECT_EQ(sent[1].worker, 2);
  EXPECT_EQ(d.sample_id(g0, 3), 3u);
  EXPECT_EQ(d.sample_id(1, 0), 4u);
  workers[2].state = WorkerState::kNeedsWeights;
  EXPECT_EQ(d.free_worker(), 1) << "a worker without the current weights gets nothing";
  workers[1].state = WorkerState::kDead;
  EXPECT_EQ(d.free_worker(), -1);
}

TEST_F(DispatcherTest, IndividualLanesQueueEverySampleUntilALaneIsFree) {
  Dispatcher d = make(true, 3);
  d.admit(problem("p"), {5}, 0);
  EXPECT_TRUE(sent.empty()) << "queued, not sent";
  EXPECT_TRUE(d.has_pending());
  int n = 0;
  while (d.send_pending()) ++n;
  EXPECT_EQ(n, 3);
  ASSERT_EQ(sent.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].request.num_samples, 1u);
    EXPECT_EQ(sent[i].request.first_sample_index, i);
  }
  d.admit(problem("q"), {5}, 0);
  EXPECT_TRUE(d.send_pending()) << "one lane of four was left";
  EXPECT_FALSE(d.send_pending()) << "every lane is busy";
  EXPECT_TRUE(d.has_pending());
  EXPECT_EQ(d.route(result(sent[0].request.request_id, 0)).kind, Kind::kSample);
  EXPECT_TRUE(d.send_pending()) << "the returned sample freed its lane";
}

TEST_F(DispatcherTest, ResultsAreRoutedByRequestAndACompleteGroupLeavesTheInFlightSet) {
  Dispatcher d = make(false, 2);
  const uint64_t g = d.admit(problem("p"), {5}, 0);
  const uint64_t req = sent[0].request.request_id;
  EXPECT_EQ(d.route(result(req + 100, 0)).kind, Kind::kIgnored) << "an unknown request";
  EXPECT_EQ(d.route(result(req, 2)).kind, Kind::kIgnored) << "a sample index outside the request";
  Dispatcher::Routed r = d.route(result(req, 1));
  ASSERT_EQ(r.kind, Kind::kSample);
  EXPECT_EQ(r.group->id, g);
  EXPECT_EQ(r.index, 1u);
  EXPECT_FALSE(d.is_complete(*r.group));
  EXPECT_EQ(d.route(result(req, 1)).kind, Kind::kIgnored) << "a second result for a sample";
  EXPECT_EQ(d.lanes_used(1), 1) << "the request still holds its lane";
  r = d.route(result(req, 0));
  ASSERT_TRUE(d.is_complete(*r.group));
  EXPECT_EQ(d.lanes_used(1), 0);
  Dispatcher::Group done = d.complete(g);
  EXPECT_EQ(done.returned, 2);
  EXPECT_TRUE(d.in_flight().empty());
  EXPECT_EQ(d.route(result(req, 0)).kind, Kind::kIgnored) << "the request is gone";
}

TEST_F(DispatcherTest, ADeadWorkersUnansweredSamplesGoBackWithTheirIdsAndGoFirst) {
  Dispatcher d = make(false, 3);
  const uint64_t g = d.admit(problem("p"), {5}, 0);
  ASSERT_EQ(sent[0].worker, 1);
  const uint64_t old_request = sent[0].request.request_id;
  d.route(result(old_request, 0));
  ASSERT_TRUE(d.send_eval(9, {7, 8}, 4, 1).ok());
  workers[1].state = WorkerState::kDead;
  EXPECT_EQ(d.requeue_worker(1), 3) << "samples 1 and 2, and the evaluation problem";
  EXPECT_EQ(d.lanes_used(1), 0);
  sent.clear();
  d.send_requeued();
  ASSERT_EQ(sent.size(), 3u) << "worker 2's two lanes, then the evaluation problem (it needs no lane)";
  EXPECT_EQ(sent[0].worker, 2);
  EXPECT_EQ(sent[0].request.first_sample_index, 1u);
  EXPECT_EQ(sent[1].request.first_sample_index, 2u);
  EXPECT_EQ(sent[1].request.num_samples, 1u);
  EXPECT_EQ(d.route(result(old_request, 1)).kind, Kind::kIgnored) << "the dead worker's late answer";
  d.route(result(sent[0].request.request_id, 1));
  EXPECT_EQ(sent[2].worker, 2);
  EXPECT_EQ(sent[2].request.temperature, 0.0f);
  EXPECT_EQ(sent[2].request.min_weight_version, 4u);
  EXPECT_THAT(std::vector<int32_t>(sent[2].request.prompt_ids.begin(), sent[2].request.prompt_ids.end()),
              ElementsAre(7, 8));
  const Dispatcher::Routed eval = d.route(result(sent[2].request.request_id, 0));
  EXPECT_EQ(eval.kind, Kind::kEval);
  EXPECT_EQ(eval.problem, 9u);
  EXPECT_EQ(d.in_flight().at(g).returned, 2);
}

TEST_F(DispatcherTest, AnEvaluationSetOfAnySizeIsSentInAWindowPerWorker) {
  // 20000 problems at once overflowed a worker's control queue (10000 messages): requests were
  // dropped and the evaluation waited for answers that could not come.
  Dispatcher d = make(false, 2);
  constexpr int kProblems = 3 * Dispatcher::kEvalWindow;
  for (int p = 0; p < kProblems; ++p) d.queue_eval(static_cast<uint64_t>(p), {5}, 0);
  d.send_requeued();
  ASSERT_EQ(sent.size(), static_cast<size_t>(2 * Dispatcher::kEvalWindow)) << "a window on each serving worker";
  int on_worker_1 = 0;
  for (const auto& s : sent) on_worker_1 += s.worker == 1;
  EXPECT_EQ(on_worker_1, Dispatcher::kEvalWindow);
  d.send_requeued();
  EXPECT_EQ(sent.size(), static_cast<size_t>(2 * Dispatcher::kEvalWindow)) << "nothing more until answers come";
  std::set<uint64_t> answered;
  for (size_t i = 0; i < sent.size(); ++i) answered.insert(d.route(result(sent[i].request.request_id, 0)).problem);
  d.send_requeued();
  ASSERT_EQ(sent.size(), static_cast<size_t>(kProblems)) << "the rest once the first windows answered";
  for (size_t i = 2 * Dispatcher::kEvalWindow; i < sent.size(); ++i)
    answered.insert(d.route(result(sent[i].request.request_id, 0)).problem);
  EXPECT_EQ(answered.size(), static_cast<size_t>(kProblems)) << "every problem asked once";
}

TEST_F(DispatcherTest, OffPolicyRequestsAreCancelledOnceAndEvaluationNever) {
  Dispatcher d = make(false, 2);
  d.admit(problem("old"), {5}, 1);
  d.admit(problem("new"), {5}, 3);
  ASSERT_TRUE(d.send_eval(0, {5}, 1, 1).ok());
  const auto older_than_2 = [](uint64_t version) { return version < 2; };
  EXPECT_THAT(d.take_off_policy(older_than_2), ElementsAre(Pair(1, ElementsAre(sent[0].request.request_id))));
  EXPECT_TRUE(d.take_off_policy(older_than_2).empty()) << "a cancel is sent once";
}

TEST_F(DispatcherTest, ABatchIsTakenWholeInOrderOrNotAtAll) {
  Dispatcher d = make(false, 1);
  for (uint64_t i = 0; i < 3; ++i) {
    Dispatcher::Group g;
    g.id = i;
    d.push_scored(std::move(g));
  }
  const auto stale_1 = [](const Dispatcher::Group& g) { return g.id == 1; };
  std::vector<Dispatcher::Group> dropped;
  EXPECT_FALSE(d.take_batch(3, stale_1, dropped).has_value()) << "two fresh groups of three wanted";
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].id, 1u) << "the stale group is dropped all the same";
  ASSERT_EQ(d.scored().size(), 2u);
  EXPECT_EQ(d.scored()[0].id, 0u) << "order kept";
  std::optional<std::vector<Dispatcher::Group>> batch = d.take_batch(2, stale_1, dropped);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ((*batch)[0].id, 0u);
  EXPECT_EQ((*batch)[1].id, 2u);
  EXPECT_TRUE(d.scored().empty());
}

TEST_F(DispatcherTest, AnOverdueRequestNamesItsWorkerUnlessExcused) {
  Dispatcher d = make(false, 1);
  d.admit(problem("p"), {5}, 0);
  const auto none = [](int) { return false; };
  EXPECT_FALSE(d.overdue(60, none).has_value());
  const std::optional<Dispatcher::Overdue> late = d.overdue(-1, none);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->worker, 1);
  EXPECT_EQ(late->request, sent[0].request.request_id);
  EXPECT_FALSE(d.overdue(-1, [](int w) { return w == 1; }).has_value()) << "a worker in a weight sync is excused";
}

TEST_F(DispatcherTest, IdsContinueAfterARestore) {
  Dispatcher d = make(false, 2);
  d.restore_next_ids(10, 50);
  EXPECT_EQ(d.admit(problem("p"), {5}, 0), 10u);
  EXPECT_EQ(sent[0].request.request_id, 50u);
  EXPECT_EQ(d.next_ids(), std::make_pair(uint64_t{11}, uint64_t{51}));
}

}  // namespace
}  // namespace rlrun::orchestrator
