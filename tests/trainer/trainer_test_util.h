// trainer_test_util.h - groups of ranks as threads (Gloo, or the CURVE transport, over loopback),
// random packed sequences.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"
#include "trainer/trainable_model.h"

namespace rlrun::trainer::testing {

// Runs body(rank, comm) on `size` threads, each with its own communicator: Gloo, or with the
// run's keys in `security` the CURVE transport (broadcasts from rank 0 only).
inline void run_group(int size, const std::function<void(int, engine::Communicator&)>& body,
                      const std::string& name = "g", const SecurityOptions& security = {}) {
  auto store = engine::make_in_process_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      engine::GroupOptions opts;
      opts.name = name;
      opts.rank = r;
      opts.size = size;
      opts.timeout = std::chrono::milliseconds(20000);
      opts.security = security;
      auto comm = engine::make_communicator(store, opts);
      ASSERT_TRUE(comm.ok()) << comm.status().message();
      body(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

inline std::unique_ptr<engine::Backend> cpu_backend() {
  auto b = engine::create_backend("cpu", 1);
  RLRUN_CHECK(b.ok(), "cpu backend");
  return std::move(b).value();
}

// One token-aligned sequence: prompt (mask 0) then completion (mask 1).
struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<float> rollout_logprobs;
  float advantage = 0;
};

inline std::vector<Sequence> random_sequences(int count, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Sequence> out(count);
  for (Sequence& s : out) {
    const int prompt = 1 + static_cast<int>(rng() % 4), completion = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < prompt + completion; ++i) {
      s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
      s.mask.push_back(i >= prompt ? 1 : 0);
      s.rollout_logprobs.push_back(i >= prompt ? -0.5f - static_cast<float>(rng() % 1000) / 500.0f : 0.0f);
    }
    s.advantage = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 500.0f;
  }
  return out;
}

// Packs the given sequences into one micro-batch (per-sequence advantages).
inline MicroBatch pack(const std::vector<Sequence>& seqs, const std::vector<int>& which) {
  std::vector<int32_t> tokens, positions, cu{0};
  std::vector<uint8_t> mask;
  std::vector<float> lp, adv;
  for (int i : which) {
    const Sequence& s = seqs[i];
    for (size_t t = 0; t < s.tokens.size(); ++t) positions.push_back(static_cast<int32_t>(t));
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    mask.insert(mask.end(), s.mask.begin(), s.mask.end());
    lp.insert(lp.end(), s.rollout_logprobs.begin(), s.rollout_logprobs.end());
    adv.push_back(s.advantage);
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  auto mb = make_micro_batch(tokens, positions, cu, mask, adv, lp);
  RLRUN_CHECK(mb.ok(), mb.status().message());
  return std::move(mb).value();
}

inline std::vector<int> range(int begin, int end) {
  std::vector<int> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

}  // namespace rlrun::trainer::testing
