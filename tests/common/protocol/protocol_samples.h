// protocol_samples.h - one fully populated message of every kind, for the protocol tests.
#pragma once

#include <vector>

#include "common/protocol/protocol.h"

namespace rlrun::testing {

// Arrays long enough (> 33 bytes) that libzmq stores them out of line, so zero-copy is observable.
inline std::vector<int32_t> iota_ids(size_t n, int32_t start) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<int32_t>(i);
  return v;
}

inline TrainBatch sample_train_batch() {
  TrainBatch b;
  b.step = 42;
  b.rank = 1;
  b.num_rows = 2;
  b.row_len = 8;
  b.num_micro_batches = 2;
  b.micro_batch_row_offsets = {0, 1, 2};
  b.loss_token_count = 9;
  b.input_ids = iota_ids(16, 100);
  b.position_ids = std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 0, 1};
  b.cu_seqlens = std::vector<int32_t>{0, 3, 8, 14, 16};  // row 0: 3+5, row 1: 6 + 2 padding
  b.loss_mask = std::vector<uint8_t>{0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0};
  b.advantages = std::vector<float>(16, 0.5f);
  b.rollout_logprobs = std::vector<float>(16, -1.25f);
  b.prefix_of = std::vector<int32_t>{-1, 0, -1, -1};  // segment 1 continues segment 0
  b.ref_logprobs = std::vector<float>(16, -1.5f);
  return b;
}

inline std::vector<Message> sample_messages() {
  std::vector<Message> out;
  out.push_back({1, Register{Role::kRollout, 3, "node7.cluster", 4242, {"cuda:0", "cuda:1"}, "token-abc"}});
  out.push_back({2, RegisterAck{17, "sha256:deadbeef",
                                {{"gloo_store", "tcp://10.0.0.1:5555"}, {"nccl_id", std::string(128, '\x01')}}}});
  Heartbeat hb;
  hb.worker_id = 17;
  hb.weight_version = 5;
  hb.active_requests = 12;
  hb.queued_requests = 3;
  hb.kv_cache_utilization = 0.75f;
  hb.memory_bytes = 1ull << 33;
  hb.peak_memory_bytes = 1ull << 34;
  hb.engine_step_costs = std::vector<double>{1, 2, 3};
  hb.kl_reference_seconds = 1.5;
  hb.kl_reference_tokens = 4096;
  out.push_back({3, hb});
  GenerateRequest gen;
  gen.request_id = 99;
  gen.prompt_ids = iota_ids(40, 1);
  gen.num_samples = 8;
  gen.first_sample_index = 0;
  gen.temperature = 0.7f;
  gen.top_p = 0.95f;
  gen.max_tokens = 256;
  gen.stop_token_ids = {2, 0};
  gen.seed = 1234567;
  gen.min_weight_version = 4;
  out.push_back({4, gen});
  GenerateResult res;
  res.request_id = 99;
  res.sample_index = 5;
  res.token_ids = iota_ids(20, 7);
  res.logprobs = std::vector<float>(20, -0.5f);
  res.finish_reason = FinishReason::kLength;
  res.error = "";
  res.first_weight_version = 4;
  res.last_weight_version = 5;
  res.queue_seconds = 0.01;
  res.prefill_seconds = 0.02;
  res.decode_seconds = 1.5;
  out.push_back({5, res});
  out.push_back({6, Cancel{{99, 100, 101}, "off_policy"}});
  out.push_back({7, sample_train_batch()});
  out.push_back({8, TrainResult{42, 1, {{"grad_norm", 0.9}, {"loss", 1.5}}, 43}});
  WeightSyncBegin begin{43, 4096, 1024, false, {}};
  begin.tensors.push_back({"model.embed_tokens.weight", DType::kBF16, {16, 64}, 0});
  begin.tensors.push_back({"model.norm.weight", DType::kF32, {64}, 2048});
  begin.group_epoch = 2;
  begin.kl_reference = true;
  out.push_back({9, begin});
  std::vector<uint8_t> bytes(1024);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  out.push_back({10, WeightBucket{43, 2, 2048, DType::kBF16, bytes}});
  out.push_back({11, WeightSyncEnd{43, false, "out of memory"}});
  out.push_back({12, Shutdown{"run finished"}});
  out.push_back({13, ErrorReply{StatusCode::kProtocol, 4, "bad request"}});
  std::vector<uint8_t> address(40);
  for (size_t i = 0; i < address.size(); ++i) address[i] = static_cast<uint8_t>(255 - i);
  out.push_back({14, StoreSet{"weights-0/rank_1", address}});
  out.push_back({15, StoreGet{"weights-0/rank_2", 30000}});
  out.push_back({16, StoreValue{"weights-0/rank_1", true, address}});
  const std::string state = R"({"steps_completed": 4, "task_draws": 9})";
  out.push_back({17, SaveCheckpoint{4, std::vector<uint8_t>(state.begin(), state.end()), true}});
  out.push_back({18, CheckpointSaved{4, true, "", "runs/x/checkpoints/step-000004", 0.25}});
  ScoreRequest score;
  score.request_id = 7;
  score.prompt_ids = iota_ids(40, 3);
  score.completion_ids = iota_ids(30, 50);
  score.completion_lengths = {10, 0, 20};
  out.push_back({19, score});
  out.push_back({20, ScoreResult{7, std::vector<float>(30, -2.5f), ""}});
  out.push_back({21, SetThreads{2, "the rollout workers idled 60%"}});
  return out;
}

}  // namespace rlrun::testing
