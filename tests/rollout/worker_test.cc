// (f) The rollout worker's loop (in-process, on its own thread) against a ControlServer playing
// the orchestrator: register, generate, heartbeat, garbage and malformed requests answered with
// errors while the worker keeps serving, idle without spinning, shutdown, a silent orchestrator.
#include <gtest/gtest.h>

#include <unistd.h>

#include <ctime>
#include <functional>
#include <map>
#include <future>
#include <thread>

#include "common/protocol/control_plane.h"
#include "engine/comm/communicator.h"
#include "rollout/worker.h"
#include "tests/rollout/rollout_test_util.h"
#include "trainer/weight_sender.h"

namespace rlrun::rollout {
namespace {

using namespace std::chrono_literals;

// The worker and everything it borrows, running on a thread.
struct WorkerThread {
  std::unique_ptr<engine::Backend> backend = testing::cpu_backend();
  std::unique_ptr<engine::Model> model = testing::tiny_model(*backend);
  std::unique_ptr<Scheduler> scheduler = testing::make_scheduler(*model, testing::small_options());
  std::unique_ptr<Worker> worker;
  Status status;
  std::thread thread;

  WorkerThread(const std::string& endpoint, double heartbeat_interval, double heartbeat_timeout) {
    WorkerOptions o;
    o.orchestrator = endpoint;
    o.index = 3;
    o.host = "test-host";
    o.heartbeat_interval_seconds = heartbeat_interval;
    o.heartbeat_timeout_seconds = heartbeat_timeout;
    worker = std::make_unique<Worker>(*scheduler, nullptr, o);
    thread = std::thread([this] { status = worker->run(); });
  }
  ~WorkerThread() {
    if (thread.joinable()) thread.join();
  }
};

// The orchestrator's side: answers heartbeats (echo) and hands everything else to the caller.
struct FakeOrchestrator {
  std::unique_ptr<ControlServer> server;
  std::string peer;
  std::vector<Heartbeat> heartbeats;

  FakeOrchestrator() {
    auto s = ControlServer::bind({});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    server = std::move(s).value();
  }

  // The next message that is not a heartbeat, within `timeout`.
  std::optional<Incoming> next(std::chrono::milliseconds timeout = 10000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto in = server->poll(20ms);
      if (!in.ok()) continue;
      if (const Heartbeat* hb = in->message.get<Heartbeat>()) {
        heartbeats.push_back(*hb);
        EXPECT_TRUE(server->send(in->peer, Heartbeat{}, in->message.correlation_id).ok());
        continue;
      }
      return std::move(in).value();
    }
    return std::nullopt;
  }

  template <class T> T expect(uint64_t* correlation = nullptr) {
    auto in = next();
    EXPECT_TRUE(in.has_value()) << "no " << message_kind_name(T::kKind) << " came";
    if (!in) return T{};
    const T* m = in->message.get<T>();
    EXPECT_NE(m, nullptr) << "expected " << message_kind_name(T::kKind) << ", got "
                          << message_kind_name(in->message.kind());
    if (correlation != nullptr) *correlation = in->message.correlation_id;
    return m == nullptr ? T{} : *m;
  }

  void accept_registration() {
    auto in = next();
    ASSERT_TRUE(in.has_value());
    const Register* reg = in->message.get<Register>();
    ASSERT_NE(reg, nullptr);
    EXPECT_EQ(reg->role, Role::kRollout);
    EXPECT_EQ(reg->rank, 3);
    EXPECT_EQ(reg->host, "test-host");
    EXPECT_EQ(reg->pid, static_cast<uint32_t>(getpid()));
    peer = in->peer;
    ASSERT_TRUE(server->send(peer, RegisterAck{42, "digest", {}}, in->message.correlation_id).ok());
  }

  template <class T> void send(const T& m, uint64_t correlation = 0) { ASSERT_TRUE(server->send(peer, m, correlation).ok()); }
};

GenerateRequest request(uint64_t id, std::vector<int32_t> prompt, uint32_t samples, uint32_t max_tokens) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.num_samples = samples;
  r.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}

TEST(Worker, ServesRequestsSurvivesGarbageAndShutsDown) {
  FakeOrchestrator orch;
  WorkerThread w(orch.server->endpoint(), 0.05, 10.0);
  orch.accept_registration();

  orch.send(request(1, {1, 2, 3}, 2, 5), 1001);
  for (int i = 0; i < 2; ++i) {
    uint64_t corr = 0;
    const auto r = orch.expect<GenerateResult>(&corr);
    EXPECT_EQ(corr, 1001u);
    EXPECT_EQ(r.request_id, 1u);
    EXPECT_EQ(r.finish_reason, FinishReason::kLength);
    EXPECT_EQ(r.token_ids.size(), 5u);
    EXPECT_EQ(r.logprobs.size(), 5u);
    EXPECT_EQ(r.weight_versions.size(), 5u);
  }

  // Idle: the loop waits in the socket poll instead of spinning.
  const std::clock_t cpu0 = std::clock();
  const auto wall0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - wall0 < 500ms) orch.next(50ms);
  const double cpu = double(std::clock() - cpu0) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu, 0.2) << "the idle worker burned " << cpu << " s of CPU in 0.5 s";

  // Garbage frames, a truncated message, a message kind the worker does not serve.
  Frames garbage;
  garbage.emplace_back(std::string("this is not rlrun"));
  ASSERT_TRUE(orch.server->send_frames(orch.peer, std::move(garbage)).ok());
  EXPECT_EQ(orch.expect<ErrorReply>().code, StatusCode::kProtocol);
  Frames truncated = encode(request(2, {1, 2}, 1, 3));
  truncated.pop_back();
  ASSERT_TRUE(orch.server->send_frames(orch.peer, std::move(truncated)).ok());
  EXPECT_EQ(orch.expect<ErrorReply>().code, StatusCode::kProtocol);
  orch.send(TrainResult{}, 77);
  uint64_t corr = 0;
  const auto err = orch.expect<ErrorReply>(&corr);
  EXPECT_EQ(err.request_kind, static_cast<uint16_t>(MessageKind::kTrainResult));
  EXPECT_EQ(corr, 77u);

  // A well-formed but invalid request: an error result, not a crash.
  orch.send(request(3, {}, 1, 3), 1003);
  auto bad = orch.expect<GenerateResult>();
  EXPECT_EQ(bad.finish_reason, FinishReason::kError);
  EXPECT_NE(bad.error.find("empty"), std::string::npos);

  // No weight-sync group in this worker: the sync is refused, not hung.
  orch.send(WeightSyncBegin{5, 0, 0, false, {}});
  const auto end = orch.expect<WeightSyncEnd>();
  EXPECT_FALSE(end.ok);
  EXPECT_EQ(end.version, 5u);

  // Held by min_weight_version, then cancelled: comes back cancelled with nothing generated.
  GenerateRequest held = request(4, {5, 6}, 1, 3);
  held.min_weight_version = 1;
  orch.send(held, 1004);
  orch.send(Cancel{{4}, "off_policy"});
  const auto cancelled = orch.expect<GenerateResult>();
  EXPECT_EQ(cancelled.request_id, 4u);
  EXPECT_EQ(cancelled.finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(cancelled.token_ids.empty());

  // Still serving.
  orch.send(request(5, {7, 8, 9}, 1, 4), 1005);
  EXPECT_EQ(orch.expect<GenerateResult>().token_ids.size(), 4u);
  const size_t seen = orch.heartbeats.size();  // wait for two heartbeats sent after the last result
  const auto hb_deadline = std::chrono::steady_clock::now() + 10s;
  while (orch.heartbeats.size() < seen + 2 && std::chrono::steady_clock::now() < hb_deadline) orch.next(100ms);
  ASSERT_GE(orch.heartbeats.size(), seen + 2);
  const Heartbeat& hb = orch.heartbeats.back();
  EXPECT_EQ(hb.worker_id, 42u);
  EXPECT_EQ(hb.tokens_generated, 14u);
  EXPECT_GT(hb.idle_seconds, 0.3);
  EXPECT_GT(hb.memory_bytes, 0u);
  EXPECT_EQ(hb.kv_blocks_used, 0u);
  EXPECT_EQ(hb.kv_blocks_free, 64u);

  orch.send(Shutdown{"test over"});
  w.thread.join();
  EXPECT_TRUE(w.status.ok()) << w.status.to_string();
  EXPECT_EQ(w.worker->summary().exit_reason, "shutdown: test over");
  EXPECT_EQ(w.worker->summary().malformed_seen, 2u);
}

// Rank `rank` of a two-member Gloo group (trainer rank 0 and the worker) over `store`.
std::unique_ptr<engine::Communicator> weight_group(const std::shared_ptr<engine::RendezvousStore>& store, const std::string& name,
                                                  int rank) {
  engine::GroupOptions g;
  g.name = name;
  g.rank = rank;
  g.size = 2;
  g.timeout = 20000ms;
  auto comm = engine::make_gloo_communicator(store, g);
  EXPECT_TRUE(comm.ok()) << comm.status().message();
  return std::move(comm).value();
}

// WeightSyncBegin -> the worker receives the weights from trainer rank 0 (a thread with the
// trainer's WeightSender) over Gloo at its next step boundary, answers WeightSyncEnd, and samples
// under the new version from then on.
TEST(Worker, LoadsNewWeightsWhenTheOrchestratorSaysSo) {
  FakeOrchestrator orch;
  auto store = engine::make_in_process_store();
  auto group = [&](int rank) { return weight_group(store, "worker-weights", rank); };
  std::promise<void> go;
  std::thread sender([&] {
    auto comm = group(0);
    auto backend = testing::cpu_backend();
    auto trainer_model = testing::tiny_model(*backend, /*seed=*/2);
    trainer::WeightSender ws(*backend, engine::flat_layout_of(trainer_model->weights()), *comm, 1024);
    go.get_future().wait();
    EXPECT_TRUE(ws.send(trainer_model->weights().master_flat(), 1).ok());
  });
  Status status;
  std::thread worker([&] {
    auto comm = group(1);
    auto backend = testing::cpu_backend();
    auto model = testing::tiny_model(*backend);
    auto scheduler = testing::make_scheduler(*model, testing::small_options());
    WorkerOptions o;
    o.orchestrator = orch.server->endpoint();
    o.index = 3;
    o.host = "test-host";
    o.heartbeat_interval_seconds = 0.05;
    Worker w(*scheduler, comm.get(), o);
    status = w.run();
  });
  orch.accept_registration();
  orch.send(request(1, {1, 2, 3}, 1, 5));
  EXPECT_EQ(orch.expect<GenerateResult>().weight_versions.to_vector(), std::vector<int64_t>(5, 0));
  orch.send(WeightSyncBegin{1, 0, 1024, false, {}});
  go.set_value();
  const auto end = orch.expect<WeightSyncEnd>();
  EXPECT_TRUE(end.ok) << end.error;
  EXPECT_EQ(end.version, 1u);
  orch.send(request(2, {1, 2, 3}, 1, 5));
  const auto after = orch.expect<GenerateResult>();
  EXPECT_EQ(after.weight_versions.to_vector(), std::vector<int64_t>(5, 1));
  EXPECT_EQ(after.first_weight_version, 1u);
  EXPECT_EQ(after.last_weight_version, 1u);
  const size_t seen = orch.heartbeats.size();
  while (orch.heartbeats.size() < seen + 1) orch.next(100ms);
  EXPECT_EQ(orch.heartbeats.back().weight_version, 1u);
  EXPECT_GT(orch.heartbeats.back().last_weight_sync_seconds, 0.0);
  orch.send(Shutdown{"done"});
  worker.join();
  sender.join();
  EXPECT_TRUE(status.ok()) << status.to_string();
}

// kl_reference_on: rollout. The sync marked kl_reference gives the worker its copy of the
// reference; from then on a ScoreRequest is answered with the reference's log-probs of each
// completion token (the training path's, under the marked version's weights however the policy
// moves on). Before a capture, and for a request with ids outside the vocabulary, the answer is
// an error, and the worker goes on serving.
TEST(Worker, ScoresCompletionsUnderTheKlReferenceAMarkedSyncGave) {
  FakeOrchestrator orch;
  auto store = engine::make_in_process_store();
  auto group = [&](int rank) { return weight_group(store, "worker-kl-reference", rank); };
  std::promise<void> send_v0, send_v1;
  std::thread sender([&] {
    auto comm = group(0);
    auto backend = testing::cpu_backend();
    auto reference = testing::tiny_model(*backend, /*seed=*/2);
    auto later = testing::tiny_model(*backend, /*seed=*/3);
    trainer::WeightSender ws(*backend, engine::flat_layout_of(reference->weights()), *comm, 1024);
    send_v0.get_future().wait();
    EXPECT_TRUE(ws.send(reference->weights().master_flat(), 0).ok());
    send_v1.get_future().wait();
    EXPECT_TRUE(ws.send(later->weights().master_flat(), 1).ok());
  });
  Status status;
  WorkerSummary summary;
  std::thread worker([&] {
    auto comm = group(1);
    auto backend = testing::cpu_backend();
    auto model = testing::tiny_model(*backend);
    auto scheduler = testing::make_scheduler(*model, testing::small_options());
    KlReference kl_reference;
    WorkerOptions o;
    o.orchestrator = orch.server->endpoint();
    o.index = 3;
    o.host = "test-host";
    o.kl_reference = &kl_reference;
    Worker w(*scheduler, comm.get(), o);
    status = w.run();
    summary = w.summary();
  });
  auto backend = testing::cpu_backend();
  auto reference = testing::tiny_model(*backend, /*seed=*/2);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  const std::vector<std::vector<int32_t>> completions = {{5, 6, 7}, {8}, {9, 10, 11, 12, 13}};
  auto score_request = [&](uint64_t id, std::vector<int32_t> last = {}) {
    ScoreRequest r;
    r.request_id = id;
    r.prompt_ids = prompt;
    std::vector<int32_t> ids;
    for (const auto& c : completions) {
      ids.insert(ids.end(), c.begin(), c.end());
      r.completion_lengths.push_back(static_cast<uint32_t>(c.size()));
    }
    ids.insert(ids.end(), last.begin(), last.end());
    if (!last.empty()) r.completion_lengths.push_back(static_cast<uint32_t>(last.size()));
    r.completion_ids = std::move(ids);
    return r;
  };
  auto expect_reference_logprobs = [&](const ScoreResult& result, uint64_t id) {
    EXPECT_EQ(result.request_id, id);
    EXPECT_EQ(result.error, "");
    std::vector<float> want;
    for (const auto& c : completions) {
      const auto lp = testing::training_logprobs(*reference, prompt, c);
      for (size_t i = 0; i < c.size(); ++i) want.push_back(lp[c[i]][i]);
    }
    ASSERT_EQ(result.ref_logprobs.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(result.ref_logprobs[i], want[i], 2e-5) << i;
  };
  orch.accept_registration();
  orch.send(score_request(1));
  const ScoreResult early = orch.expect<ScoreResult>();
  EXPECT_TRUE(early.ref_logprobs.empty());
  EXPECT_NE(early.error.find("no KL reference yet"), std::string::npos) << early.error;

  WeightSyncBegin v0{0, 0, 1024, false, {}};
  v0.kl_reference = true;
  orch.send(v0);
  send_v0.set_value();
  EXPECT_TRUE(orch.expect<WeightSyncEnd>().ok);
  orch.send(score_request(2));
  orch.send(score_request(3, {4, 1 << 20}));  // an id outside the vocabulary fails only its own request
  orch.send(score_request(4));
  std::map<uint64_t, ScoreResult> answers;
  for (int i = 0; i < 3; ++i) {
    const ScoreResult r = orch.expect<ScoreResult>();
    answers[r.request_id] = r;
  }
  expect_reference_logprobs(answers[2], 2);
  EXPECT_TRUE(answers[3].ref_logprobs.empty());
  EXPECT_NE(answers[3].error, "");
  expect_reference_logprobs(answers[4], 4);

  orch.send(WeightSyncBegin{1, 0, 1024, false, {}});  // not marked: the policy moves, the reference stays
  send_v1.set_value();
  EXPECT_TRUE(orch.expect<WeightSyncEnd>().ok);
  orch.send(request(5, {1, 2, 3}, 1, 4));  // generating goes on beside it
  orch.send(score_request(6));
  for (int i = 0; i < 2; ++i) {
    auto in = orch.next();
    ASSERT_TRUE(in.has_value());
    if (const auto* r = in->message.get<GenerateResult>()) EXPECT_EQ(r->first_weight_version, 1u);
    else if (const auto* q = in->message.get<ScoreResult>()) expect_reference_logprobs(*q, 6);
    else ADD_FAILURE() << "unexpected " << message_kind_name(in->message.kind());
  }
  orch.send(Shutdown{"done"});
  worker.join();
  sender.join();
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(summary.kl_reference_scored, 9u);
}

// A replacement worker (no group yet) joins the group its first WeightSyncBegin names through
// join_weight_group, then receives; a group it cannot join is an error in WeightSyncEnd, and the
// worker keeps serving.
TEST(Worker, JoinsTheWeightGroupASyncNames) {
  FakeOrchestrator orch;
  auto store = engine::make_in_process_store();
  auto group = [&](int rank, uint32_t epoch) -> Result<std::unique_ptr<engine::Communicator>> {
    if (epoch == 9) return unavailable("group weights-9 cannot form");
    engine::GroupOptions g;
    g.name = "weights-" + std::to_string(epoch);
    g.rank = rank;
    g.size = 2;
    g.timeout = 20000ms;
    return engine::make_gloo_communicator(store, g);
  };
  std::thread sender([&] {
    auto comm = group(0, 4);
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    auto backend = testing::cpu_backend();
    auto trainer_model = testing::tiny_model(*backend, /*seed=*/2);
    trainer::WeightSender ws(*backend, engine::flat_layout_of(trainer_model->weights()), **comm, 1024);
    EXPECT_TRUE(ws.send(trainer_model->weights().master_flat(), 7).ok());
  });
  std::vector<uint32_t> joined;
  Status status;
  std::thread worker([&] {
    auto backend = testing::cpu_backend();
    auto model = testing::tiny_model(*backend);
    auto scheduler = testing::make_scheduler(*model, testing::small_options());
    WorkerOptions o;
    o.orchestrator = orch.server->endpoint();
    o.index = 3;
    o.host = "test-host";
    o.heartbeat_interval_seconds = 0.05;
    o.join_weight_group = [&](uint32_t epoch) {
      joined.push_back(epoch);
      return group(1, epoch);
    };
    Worker w(*scheduler, nullptr, o);
    status = w.run();
  });
  orch.accept_registration();
  WeightSyncBegin begin{7, 0, 1024, false, {}};
  begin.group_epoch = 4;
  orch.send(begin);
  const auto end = orch.expect<WeightSyncEnd>();
  EXPECT_TRUE(end.ok) << end.error;
  EXPECT_EQ(end.version, 7u);
  sender.join();
  begin.group_epoch = 9;
  orch.send(begin);
  const auto failed = orch.expect<WeightSyncEnd>();
  EXPECT_FALSE(failed.ok);
  EXPECT_NE(failed.error.find("weights-9"), std::string::npos) << failed.error;
  orch.send(request(1, {1, 2, 3}, 1, 5));
  EXPECT_EQ(orch.expect<GenerateResult>().weight_versions.to_vector(), std::vector<int64_t>(5, 7));
  orch.send(Shutdown{"done"});
  worker.join();
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(joined, (std::vector<uint32_t>{4, 9}));
}

TEST(Worker, ExitsWhenTheOrchestratorGoesSilent) {
  FakeOrchestrator orch;
  WorkerThread w(orch.server->endpoint(), 0.05, 0.4);
  orch.accept_registration();
  const auto start = std::chrono::steady_clock::now();
  w.thread.join();  // nobody answers its heartbeats
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(w.status.code(), StatusCode::kUnavailable) << w.status.to_string();
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 5.0);
}

TEST(Worker, FailsRegistrationWhenNobodyAnswers) {
  FakeOrchestrator orch;  // binds a port, never reads it
  WorkerThread w(orch.server->endpoint(), 0.05, 0.3);
  w.thread.join();
  EXPECT_EQ(w.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(w.status.message().find("RegisterAck"), std::string::npos) << w.status.message();
}

}  // namespace
}  // namespace rlrun::rollout
