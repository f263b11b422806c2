// rollout_test_util.h - a tiny decoder, a scheduler over it, and the training-path reference the
// rollout tests compare against.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "rollout/scheduler.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::rollout::testing {

using engine::testing::cpu_backend;

inline std::unique_ptr<engine::Model> tiny_model(engine::Backend& backend, uint64_t seed = 1) {
  return engine::testing::tiny_model(backend, /*qwen2=*/false, seed, /*std=*/0.5f);
}

inline SchedulerOptions small_options(int64_t num_blocks = 64, int64_t block_size = 4, int64_t max_model_len = 48) {
  SchedulerOptions o;
  o.max_num_seqs = 16;
  o.max_model_len = max_model_len;
  o.kv_block_size = block_size;
  o.kv_num_blocks = num_blocks;
  return o;
}

inline std::unique_ptr<Scheduler> make_scheduler(engine::Model& model, const SchedulerOptions& o) {
  auto s = Scheduler::create(model, o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

inline GenerationRequest greedy_request(uint64_t id, std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.request_id = id;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

inline std::vector<int32_t> prompt_of(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  return engine::testing::random_ids(rng, n, 64);
}

// Steps until nothing is left (bounded); returns every output keyed by (request, sample).
inline std::map<std::pair<uint64_t, uint32_t>, SampleOutput> run_to_end(Scheduler& s, int max_steps = 10000) {
  std::map<std::pair<uint64_t, uint32_t>, SampleOutput> out;
  for (int i = 0; i < max_steps && s.has_unfinished(); ++i) EXPECT_TRUE(s.step().ok());
  EXPECT_FALSE(s.has_unfinished());
  for (SampleOutput& o : s.take_finished()) out[{o.request_id, o.sample_index}] = std::move(o);
  return out;
}

// The training path's view of prompt + completion: lp[v][i] = log p(v | prompt, completion[0..i))
// for every vocabulary entry v and every completion position i, from ONE Model::forward over V
// copies of the sequence (copy v has target v at every completion position).
inline std::vector<std::vector<float>> training_logprobs(engine::Model& model, const std::vector<int32_t>& prompt,
                                                         const std::vector<int32_t>& completion) {
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), completion.begin(), completion.end());
  engine::testing::HostBatch batch;
  for (int32_t v = 0; v < vocab; ++v) {
    std::vector<int32_t> targets(seq.size(), -1);
    for (size_t i = 0; i < completion.size(); ++i) targets[prompt.size() - 1 + i] = v;
    batch.add_sequence(seq, targets);
  }
  auto out = model.forward(batch.batch(), /*for_backward=*/false);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  const std::vector<float> flat = engine::to_host_f32(out->logprobs);
  std::vector<std::vector<float>> lp(vocab, std::vector<float>(completion.size()));
  for (int32_t v = 0; v < vocab; ++v)
    for (size_t i = 0; i < completion.size(); ++i) lp[v][i] = flat[v * seq.size() + prompt.size() - 1 + i];
  return lp;
}

}  // namespace rlrun::rollout::testing
