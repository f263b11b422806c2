// The continuous-batching scheduler against the engine's training forward: greedy decoding,
// log-probs (the train/inference mismatch), preemption under a small KV pool, cancel, bad
// requests, and short requests overtaking a long one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "rollout/scheduler.h"
#include "tests/rollout/rollout_test_util.h"

namespace rlrun::rollout {
namespace {

using testing::greedy_request;
using testing::prompt_of;
using testing::run_to_end;

// Largest |rollout log-prob - training log-prob| over the sampled tokens of `out`; also checks
// (greedy) that every token is the training forward's argmax given the tokens before it, which
// by induction is "repeated argmax of the training forward over the growing sequence".
double check_against_training(engine::Model& model, const std::vector<int32_t>& prompt, const SampleOutput& out,
                              bool greedy) {
  const auto lp = testing::training_logprobs(model, prompt, out.tokens);
  double worst = 0;
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const float mine = lp[out.tokens[i]][i];
    worst = std::max(worst, std::abs(double(out.logprobs[i]) - double(mine)));
    if (!greedy) continue;
    for (size_t v = 0; v < lp.size(); ++v)
      EXPECT_LE(lp[v][i], mine + 1e-5f) << "position " << i << ": token " << v << " beats the greedy pick "
                                        << out.tokens[i];
  }
  return worst;
}

TEST(Scheduler, GreedyIsRepeatedArgmaxOfTheTrainingForward) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto s = testing::make_scheduler(*model, testing::small_options());
  const std::vector<size_t> lens = {1, 5, 9, 17};
  for (size_t i = 0; i < lens.size(); ++i) s->add(greedy_request(i, prompt_of(lens[i], 10 + i), 12 + 3 * i));
  auto out = run_to_end(*s);
  ASSERT_EQ(out.size(), lens.size());
  double worst = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    const SampleOutput& o = out.at({i, 0});
    EXPECT_EQ(o.finish_reason, FinishReason::kLength);
    EXPECT_EQ(o.tokens.size(), 12 + 3 * i);
    worst = std::max(worst, check_against_training(*model, prompt_of(lens[i], 10 + i), o, true));
  }
  std::printf("greedy: max |rollout - training| log-prob = %.3g\n", worst);
  EXPECT_LT(worst, 1e-4);
}

// (b) temperature 1, top_p 1: the sampled distribution is the model's, so the returned log-probs
// are what the trainer recomputes for the same weights and tokens.
TEST(Scheduler, SampledLogprobsEqualTrainingLogprobs) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto s = testing::make_scheduler(*model, testing::small_options());
  GenerationRequest r = greedy_request(7, prompt_of(6, 3), 20);
  r.sampling.temperature = 1.0f;
  r.num_samples = 4;
  r.seed = 99;
  s->add(r);
  auto out = run_to_end(*s);
  ASSERT_EQ(out.size(), 4u);
  double worst = 0;
  for (uint32_t k = 0; k < 4; ++k) worst = std::max(worst, check_against_training(*model, r.prompt, out.at({7, k}), false));
  std::printf("train/inference mismatch (T=1, top_p=1): max |rollout - training| log-prob = %.3g\n", worst);
  RecordProperty("max_logprob_mismatch", std::to_string(worst));
  EXPECT_LT(worst, 1e-4);
  EXPECT_NE(out.at({7, 0}).tokens, out.at({7, 1}).tokens) << "samples of one request share a random stream";
}

// Temperature T: the rollout log-prob is log softmax(logits / T), which the training path gives
// as lp / T - logsumexp(lp / T) from its full-vocabulary log-probs lp. With top_p < 1 the sampler
// renormalises over the nucleus, so its log-prob is never below the tempered full-vocabulary one.
TEST(Scheduler, TemperatureAndTopPLogprobs) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  for (float top_p : {1.0f, 0.8f}) {
    auto s = testing::make_scheduler(*model, testing::small_options());
    GenerationRequest r = greedy_request(1, prompt_of(6, 4), 16);
    r.sampling = {0.7f, top_p};
    r.num_samples = 3;
    r.seed = 5;
    s->add(r);
    auto out = run_to_end(*s);
    double worst = 0, worst_nucleus = 0;
    for (uint32_t k = 0; k < 3; ++k) {
      const SampleOutput& o = out.at({1, k});
      const auto lp = testing::training_logprobs(*model, r.prompt, o.tokens);
      for (size_t i = 0; i < o.tokens.size(); ++i) {
        double m = -1e30, z = 0;
        for (const auto& row : lp) m = std::max(m, double(row[i]) / 0.7);
        for (const auto& row : lp) z += std::exp(double(row[i]) / 0.7 - m);
        const double tempered = double(lp[o.tokens[i]][i]) / 0.7 - (m + std::log(z));
        const double diff = double(o.logprobs[i]) - tempered;
        if (top_p == 1.0f) worst = std::max(worst, std::abs(diff));
        else EXPECT_GE(diff, -1e-4);
        worst_nucleus = std::max(worst_nucleus, diff);
      }
    }
    if (top_p == 1.0f) {
      std::printf("T=0.7, top_p=1: max |rollout - training| log-prob = %.3g\n", worst);
      EXPECT_LT(worst, 1e-4);
    } else {
      std::printf("T=0.7, top_p=0.8: rollout log-prob exceeds the full-vocabulary one by up to %.3g "
                  "(nucleus renormalisation, by design)\n", worst_nucleus);
    }
  }
}

TEST(Scheduler, SamplingDoesNotDependOnBatching) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  GenerationRequest r = greedy_request(7, prompt_of(6, 3), 20);
  r.sampling.temperature = 1.0f;
  r.num_samples = 4;
  r.seed = 99;
  auto s = testing::make_scheduler(*model, testing::small_options());
  s->add(r);
  auto out = run_to_end(*s);
  // The same request again (other batching: alone vs. with a long neighbour) samples the same.
  auto s2 = testing::make_scheduler(*model, testing::small_options());
  s2->add(greedy_request(1, prompt_of(20, 5), 25));
  s2->add(r);
  auto again = run_to_end(*s2);
  for (uint32_t k = 0; k < 4; ++k) EXPECT_EQ(again.at({7, k}).tokens, out.at({7, k}).tokens);
}

// The samples of a request fork the prompt's KV from the first one instead of computing it: each
// sample still scores its tokens exactly as the training forward does, and samples the same
// tokens as when it is requested alone (its random stream depends on the seed and its index).
TEST(Scheduler, SamplesOfOnePromptShareItsKv) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  GenerationRequest r = greedy_request(3, prompt_of(11, 6), 14);  // 10 shareable tokens: 2 full blocks of 4
  r.sampling.temperature = 1.0f;
  r.num_samples = 8;
  r.seed = 21;
  auto s = testing::make_scheduler(*model, testing::small_options());
  s->add(r);
  auto out = run_to_end(*s);
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(s->stats().prefix_tokens_shared, 7 * 10);
  EXPECT_EQ(s->stats().kv_blocks_used, 0);
  double worst = 0;
  for (uint32_t k = 0; k < 8; ++k) worst = std::max(worst, check_against_training(*model, r.prompt, out.at({3, k}), false));
  std::printf("forked prompts: max |rollout - training| log-prob = %.3g\n", worst);
  EXPECT_LT(worst, 1e-4);
  for (uint32_t k = 0; k < 8; ++k) {
    GenerationRequest alone = r;
    alone.request_id = 100 + k;
    alone.num_samples = 1;
    alone.first_sample_index = k;
    auto solo = testing::make_scheduler(*model, testing::small_options());
    solo->add(alone);
    auto one = run_to_end(*solo);
    EXPECT_EQ(solo->stats().prefix_tokens_shared, 0);
    EXPECT_EQ(one.at({100 + k, k}).tokens, out.at({3, k}).tokens) << "sample " << k;
  }
}

// Forks and preemption together in a pool far too small: shared blocks are returned only by
// their last holder (the pool is whole at the end) and the greedy results equal a big pool's.
TEST(Scheduler, ForkedSamplesSurvivePreemption) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto add_all = [](Scheduler& s) {
    for (uint64_t i = 0; i < 3; ++i) {
      GenerationRequest r = greedy_request(i, prompt_of(9 + 4 * i, 70 + i), 20);
      r.num_samples = 4;
      s.add(r);
    }
  };
  auto big = testing::make_scheduler(*model, testing::small_options(256));
  add_all(*big);
  auto expected = run_to_end(*big);
  EXPECT_GT(big->stats().prefix_tokens_shared, 0);
  auto small = testing::make_scheduler(*model, testing::small_options(/*num_blocks=*/16));
  add_all(*small);
  auto got = run_to_end(*small);
  EXPECT_GT(small->stats().preemptions, 0);
  EXPECT_GT(small->stats().prefix_tokens_shared, 0);
  EXPECT_EQ(small->stats().kv_blocks_used, 0);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [key, want] : expected) EXPECT_EQ(got.at(key).tokens, want.tokens) << "request " << key.first;
}

// (c) A pool far too small for every request: all complete, some were preempted (counted) and
// the greedy results equal the unconstrained run.
TEST(Scheduler, SmallPoolPreemptsAndRecomputesToTheSameResult) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto add_all = [](Scheduler& s) {
    for (uint64_t i = 0; i < 6; ++i) s.add(greedy_request(i, prompt_of(3 + 2 * i, 40 + i), 24));
  };
  auto big = testing::make_scheduler(*model, testing::small_options(256));
  add_all(*big);
  auto expected = run_to_end(*big);
  EXPECT_EQ(big->stats().preemptions, 0);

  auto small = testing::make_scheduler(*model, testing::small_options(/*num_blocks=*/14));  // 56 slots
  add_all(*small);
  auto got = run_to_end(*small);
  EXPECT_GT(small->stats().preemptions, 0);
  ASSERT_EQ(got.size(), expected.size());
  uint32_t preempted_samples = 0;
  for (const auto& [key, want] : expected) {
    const SampleOutput& o = got.at(key);
    EXPECT_EQ(o.finish_reason, want.finish_reason);
    EXPECT_EQ(o.tokens, want.tokens) << "request " << key.first;
    for (size_t i = 0; i < o.logprobs.size() && i < want.logprobs.size(); ++i)
      EXPECT_NEAR(o.logprobs[i], want.logprobs[i], 1e-4);
    preempted_samples += o.preemptions;
  }
  EXPECT_EQ(preempted_samples, small->stats().preemptions);
  EXPECT_EQ(small->stats().kv_blocks_used, 0);
  std::printf("small pool: %lld preemptions, all %zu requests complete\n",
              static_cast<long long>(small->stats().preemptions), got.size());
}

// Streaming requests report each token once, in order, as sampled, even when preempted and
// recomputed; the others report none.
TEST(Scheduler, StreamedTokensAreTheOutputsTokensOnceEach) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto s = testing::make_scheduler(*model, testing::small_options(/*num_blocks=*/14));
  for (uint64_t i = 0; i < 6; ++i) {
    GenerationRequest r = greedy_request(i, prompt_of(3 + 2 * i, 40 + i), 24);
    r.stream = i % 2 == 0;
    s->add(std::move(r));
  }
  std::map<uint64_t, std::vector<int32_t>> streamed;
  std::map<uint64_t, std::vector<float>> streamed_logprobs;
  std::map<uint64_t, SampleOutput> finished;
  for (int step = 0; step < 10000 && s->has_unfinished(); ++step) {
    ASSERT_TRUE(s->step().ok());
    for (const StreamedToken& t : s->take_streamed()) {
      EXPECT_FALSE(finished.count(t.request_id)) << "a token streamed after its sample finished";
      streamed[t.request_id].push_back(t.token);
      streamed_logprobs[t.request_id].push_back(t.logprob);
    }
    for (SampleOutput& o : s->take_finished()) finished[o.request_id] = std::move(o);
  }
  EXPECT_GT(s->stats().preemptions, 0);
  ASSERT_EQ(finished.size(), 6u);
  for (const auto& [id, out] : finished) {
    if (id % 2 == 1) {
      EXPECT_FALSE(streamed.count(id)) << "request " << id << " did not ask to stream";
      continue;
    }
    EXPECT_EQ(streamed[id], out.tokens) << "request " << id;
    EXPECT_EQ(streamed_logprobs[id], out.logprobs) << "request " << id;
  }
}

// (d) Cancel returns blocks at once, running or waiting, with what was generated so far.
TEST(Scheduler, CancelFreesBlocksAtOnce) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  SchedulerOptions o = testing::small_options();
  o.max_num_seqs = 2;
  auto s = testing::make_scheduler(*model, o);
  s->add(greedy_request(1, prompt_of(9, 1), 30));
  s->add(greedy_request(2, prompt_of(9, 2), 30));
  GenerationRequest waiting = greedy_request(3, prompt_of(4, 3), 30);
  waiting.num_samples = 2;
  s->add(waiting);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->step().ok());
  const int64_t used = s->stats().kv_blocks_used;
  ASSERT_EQ(s->stats().running, 2);
  EXPECT_EQ(s->cancel(1), 1);
  EXPECT_LT(s->stats().kv_blocks_used, used);
  EXPECT_EQ(s->stats().kv_blocks_used, 3);  // request 2: 9 + 2 tokens in the cache = 3 blocks of 4
  EXPECT_EQ(s->cancel(3), 2);               // never admitted
  EXPECT_EQ(s->cancel(3), 0);
  auto done = s->take_finished();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].request_id, 1u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(done[0].tokens.size(), 3u);
  EXPECT_EQ(done[0].logprobs.size(), 3u);
  EXPECT_EQ(done[1].finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(done[1].tokens.empty());
  EXPECT_EQ(s->cancel(2), 1);
  EXPECT_EQ(s->stats().kv_blocks_used, 0);
  EXPECT_FALSE(s->has_unfinished());
}

TEST(Scheduler, BadRequestsGetErrorResultsAndTheRestIsServed) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto s = testing::make_scheduler(*model, testing::small_options(64, 4, 16));
  s->add(greedy_request(1, {}, 4));                            // empty prompt
  s->add(greedy_request(2, prompt_of(16, 1), 4));              // prompt + 1 > max_model_len
  s->add(greedy_request(3, {1, 2, 64}, 4));                    // id outside the vocabulary
  GenerationRequest hot = greedy_request(4, {1, 2}, 4);
  hot.sampling.temperature = std::nanf("");
  s->add(hot);
  GenerationRequest many = greedy_request(5, {1, 2}, 4);
  many.num_samples = 1u << 30;
  s->add(many);
  s->add(greedy_request(6, prompt_of(15, 1), 4));              // fits exactly: one token
  s->add(greedy_request(7, prompt_of(5, 1), 0));               // 0: until max_model_len
  s->add(greedy_request(7, prompt_of(5, 1), 3));               // duplicate id while in flight
  auto out = run_to_end(*s);
  for (uint64_t id : {1, 2, 3, 4, 5}) {
    EXPECT_EQ(out.at({id, 0}).finish_reason, FinishReason::kError) << id;
    EXPECT_NE(out.at({id, 0}).error.find("request " + std::to_string(id)), std::string::npos) << out.at({id, 0}).error;
  }
  EXPECT_EQ(out.at({6, 0}).tokens.size(), 1u);
  EXPECT_EQ(out.at({6, 0}).finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.at({7, 0}).tokens.size(), 11u);  // 5 + 11 = max_model_len 16
  // The duplicate got an error result under the same key; the original's is kept by the count.
  EXPECT_EQ(s->stats().tokens_generated, 12);
}

TEST(Scheduler, StopTokenFinishesWithStopAndIsKept) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto free = testing::make_scheduler(*model, testing::small_options());
  free->add(greedy_request(1, prompt_of(5, 8), 10));
  const std::vector<int32_t> free_run = run_to_end(*free).at({1, 0}).tokens;
  auto s = testing::make_scheduler(*model, testing::small_options());
  GenerationRequest r = greedy_request(1, prompt_of(5, 8), 10);
  r.stop_token_ids = {free_run[3]};
  s->add(r);
  auto out = run_to_end(*s);
  const auto& o = out.at({1, 0});
  EXPECT_EQ(o.finish_reason, FinishReason::kStop);
  const size_t first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  EXPECT_EQ(o.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
}

// (g) Continuous batching: short requests that arrive after a long one finish first, a few
// steps after they arrive, while the long one keeps running.
TEST(Scheduler, ShortRequestsOvertakeALongOne) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto s = testing::make_scheduler(*model, testing::small_options(64, 4, 96));
  s->add(greedy_request(100, prompt_of(8, 1), 80));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->step().ok());
  for (uint64_t id = 1; id <= 3; ++id) s->add(greedy_request(id, prompt_of(3, id), 4));
  std::vector<uint64_t> order;
  int steps_until_short_done = 0;
  for (int i = 0; i < 200 && s->has_unfinished(); ++i) {
    ASSERT_TRUE(s->step().ok());
    for (auto& o : s->take_finished()) order.push_back(o.request_id);
    if (order.size() == 3 && steps_until_short_done == 0) steps_until_short_done = i + 1;
  }
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order.back(), 100u);
  EXPECT_EQ(steps_until_short_done, 4);  // admitted at once, 4 tokens in 4 steps
  EXPECT_EQ(s->stats().max_running, 4);
}

TEST(Scheduler, RejectsAPoolThatCannotHoldOneSequence) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend);
  auto s = Scheduler::create(*model, testing::small_options(/*num_blocks=*/3, 4, 16));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("kv_cache_memory_mb"), std::string::npos);
  SchedulerOptions o = testing::small_options();
  EXPECT_EQ(kv_blocks_for_budget(*model, o, 0), o.max_num_seqs * 12);
  // tiny model: 2 layers x (K + V) x 2 kv heads x 8 dims x 4 bytes = 256 bytes per token.
  EXPECT_EQ(kv_blocks_for_budget(*model, o, 256 * 4 * 10), 10);
}

}  // namespace
}  // namespace rlrun::rollout
