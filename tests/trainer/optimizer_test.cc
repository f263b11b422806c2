// Optimizer: AdamW over flat buffers, SUM reduction across ranks, global-norm clipping, and the
// distributed (ZeRO-1) optimizer against the plain one.
#include "trainer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {


using engine::DType;
using engine::Shape;
using testing::cpu_backend;
using testing::run_group;

// Rank r's gradient at step s: deterministic pseudo-random values, large enough to be clipped
// on some steps.
std::vector<float> grad_of(int rank, int step, int64_t n) {
  std::mt19937 rng(1000 * rank + step);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> g(n);
  for (float& x : g) x = u(rng) * (step % 2 == 0 ? 3.0f : 0.01f);
  return g;
}

std::vector<float> initial_params(int64_t n) {
  std::vector<float> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = std::sin(0.37f * i);
  return p;
}

std::vector<ParamRange> ranges_of(int64_t n) {
  // a "matrix" (decayed), a gap (padding), a "norm" (not decayed)
  return {{0, n / 2, true}, {n / 2 + 3, n, false}};
}

OptimizerOptions options(bool distributed) {
  OptimizerOptions o;
  o.weight_decay = 0.1;
  o.grad_clip = 1.0;
  o.use_distributed_optimizer = distributed;
  return o;
}

// Runs `steps` optimizer steps on `ranks` ranks where each rank contributes grad_of(rank, ...);
// returns rank 0's final params (and checks all ranks agree exactly).
std::vector<float> run_steps(int ranks, bool distributed, int64_t n, int steps,
                             std::vector<OptimizerStepStats>* stats_out = nullptr) {
  std::vector<std::vector<float>> finals(ranks);
  std::vector<std::vector<OptimizerStepStats>> stats(ranks);
  run_group(ranks, [&](int rank, engine::Communicator& comm) {
    auto backend = cpu_backend();
    auto opt = Optimizer::create(*backend, n, ranges_of(n), options(distributed), &comm);
    ASSERT_TRUE(opt.ok()) << opt.status().message();
    EXPECT_EQ((*opt)->sharded(), distributed && ranks > 1);
    std::vector<float> p0 = initial_params(n);
    auto params = engine::from_host(*backend, Shape{n}, p0);
    for (int s = 0; s < steps; ++s) {
      std::vector<float> g = grad_of(rank, s, n);
      auto grads = engine::from_host(*backend, Shape{n}, g);
      auto st = (*opt)->step(params, grads, 0.01 * (s + 1));
      ASSERT_TRUE(st.ok()) << st.status().message();
      stats[rank].push_back(*st);
    }
    finals[rank] = engine::to_host_f32(params);
  }, "opt" + std::to_string(ranks) + (distributed ? "d" : "p"));
  for (int r = 1; r < ranks; ++r) EXPECT_EQ(finals[r], finals[0]) << "rank " << r << " diverged";
  if (stats_out != nullptr) *stats_out = stats[0];
  return finals[0];
}

// A single rank given the SUM of all ranks' gradients: the reference.
std::vector<float> run_reference(int ranks, int64_t n, int steps, std::vector<OptimizerStepStats>* stats_out) {
  auto backend = cpu_backend();
  auto opt = Optimizer::create(*backend, n, ranges_of(n), options(false), nullptr);
  EXPECT_TRUE(opt.ok());
  std::vector<float> p0 = initial_params(n);
  auto params = engine::from_host(*backend, Shape{n}, p0);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> sum(n, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> g = grad_of(r, s, n);
      for (int64_t i = 0; i < n; ++i) sum[i] += g[i];
    }
    auto grads = engine::from_host(*backend, Shape{n}, sum);
    auto st = (*opt)->step(params, grads, 0.01 * (s + 1));
    EXPECT_TRUE(st.ok());
    stats_out->push_back(*st);
  }
  return engine::to_host_f32(params);
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
}

TEST(Optimizer, ShardedEqualsPlainAndSingleRankReference) {
  for (int64_t n : {71, 1000}) {  // 71: odd, so rank 0 owns a tail element
    const int steps = 5;
    std::vector<OptimizerStepStats> ref_stats, plain_stats, sharded_stats;
    const auto reference = run_reference(2, n, steps, &ref_stats);
    const auto plain = run_steps(2, false, n, steps, &plain_stats);
    const auto sharded = run_steps(2, true, n, steps, &sharded_stats);
    expect_close(plain, reference, 1e-6f);
    expect_close(sharded, reference, 1e-6f);
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(sharded_stats[s].grad_norm, ref_stats[s].grad_norm, 1e-5 * ref_stats[s].grad_norm);
      EXPECT_NEAR(plain_stats[s].grad_norm, ref_stats[s].grad_norm, 1e-5 * ref_stats[s].grad_norm);
      EXPECT_EQ(sharded_stats[s].step, s + 1);
    }
    EXPECT_LT(ref_stats[0].clip_coef, 1.0);   // large gradients were clipped
    EXPECT_EQ(ref_stats[1].clip_coef, 1.0);   // small ones were not
  }
}

// bf16 weights with the distributed optimizer: each rank keeps the f32 master of its shard only
// (12 bytes of state per owned element), which follows the f32 reference exactly, and every rank's
// bf16 weights are that master rounded.
TEST(Optimizer, ShardedMasterWithBf16WeightsFollowsTheF32Reference) {
  for (int ranks : {2, 3}) {
    const int64_t n = 1001, steps = 4;
    std::vector<OptimizerStepStats> ref_stats;
    const std::vector<float> reference = run_reference(ranks, n, steps, &ref_stats);
    std::vector<std::vector<float>> weights(ranks), master(ranks, std::vector<float>(n, 0.0f));
    run_group(ranks, [&](int rank, engine::Communicator& comm) {
      auto backend = cpu_backend();
      auto opt = Optimizer::create(*backend, n, ranges_of(n), options(true), &comm, DType::kBF16);
      ASSERT_TRUE(opt.ok()) << opt.status().message();
      ASSERT_TRUE((*opt)->keeps_master());
      int64_t owned = 0;
      for (const auto& [b, e] : (*opt)->owned_ranges()) owned += e - b;
      EXPECT_EQ((*opt)->state_bytes(), static_cast<size_t>(12 * owned + 4 * (n / ranks)));
      const auto full = engine::from_host(*backend, Shape{n}, initial_params(n));
      (*opt)->init_master(full);
      auto w = backend->zeros(Shape{n}, DType::kBF16);
      backend->convert(w, full);
      for (int s = 0; s < steps; ++s) {
        auto grads = engine::from_host(*backend, Shape{n}, grad_of(rank, s, n));
        ASSERT_TRUE((*opt)->step(engine::Tensor(), w, grads, 0.01 * (s + 1)).ok());
      }
      weights[rank] = engine::to_host_f32(w);
      for (const auto& [b, e] : (*opt)->owned_ranges()) (*opt)->copy_master_to_host(engine::Tensor(), b, e, &master[rank][b]);
    }, "optbf16-" + std::to_string(ranks));
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(weights[r], weights[0]) << "rank " << r << " diverged";
    for (int64_t i = 0; i < n; ++i) {
      float m = 0.0f;  // exactly one rank owns element i
      for (int r = 0; r < ranks; ++r) m += master[r][i];
      EXPECT_NEAR(m, reference[i], 1e-6f) << "master element " << i;
      EXPECT_EQ(weights[0][i], engine::bf16_to_f32(engine::f32_to_bf16(m))) << "weight element " << i;
    }
  }
}

TEST(Optimizer, F32WeightsAreTheMaster) {
  run_group(2, [&](int, engine::Communicator& comm) {
    auto backend = cpu_backend();
    auto opt = Optimizer::create(*backend, 100, {}, options(true), &comm);
    ASSERT_TRUE(opt.ok());
    EXPECT_FALSE((*opt)->keeps_master());
    EXPECT_EQ((*opt)->state_bytes(), static_cast<size_t>(8 * 50 + 4 * 50));  // moments + grad shard
    // One step, a collective: no rank leaves the group while its peer is still joining it.
    auto params = engine::from_host(*backend, Shape{100}, initial_params(100));
    auto grads = engine::from_host(*backend, Shape{100}, grad_of(0, 1, 100));
    ASSERT_TRUE((*opt)->step(params, grads, 0.01).ok());
  }, "optf32");
  auto backend = cpu_backend();  // plain: the model's full master, never a copy
  auto plain = Optimizer::create(*backend, 100, {}, options(false), nullptr, DType::kBF16);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->keeps_master());
}

TEST(Optimizer, ThreeRanksShardedWithTail) {
  std::vector<OptimizerStepStats> ref_stats;
  expect_close(run_steps(3, true, 100, 3), run_reference(3, 100, 3, &ref_stats), 1e-6f);
}

TEST(Optimizer, SingleStepMatchesHandComputedAdamW) {
  auto backend = cpu_backend();
  OptimizerOptions o;
  o.grad_clip = 0.0;
  o.weight_decay = 0.5;
  auto opt = Optimizer::create(*backend, 4, {{0, 2, true}}, o, nullptr);
  ASSERT_TRUE(opt.ok());
  auto params = engine::from_host(*backend, Shape{4}, std::vector<float>{1, 1, 1, 1});
  auto grads = engine::from_host(*backend, Shape{4}, std::vector<float>{0.5f, -2, 0, 3});
  auto st = (*opt)->step(params, grads, 0.1);
  ASSERT_TRUE(st.ok());
  EXPECT_NEAR(st->grad_norm, std::sqrt(0.25 + 4 + 9), 1e-6);
  const auto p = engine::to_host_f32(params);
  // step 1: mhat = g, vhat = g^2, update = sign(g) (|g| >> eps); decay 0.5 on elements 0, 1 only.
  EXPECT_NEAR(p[0], 1 - 0.1 * (1 + 0.5), 1e-5);
  EXPECT_NEAR(p[1], 1 - 0.1 * (-1 + 0.5), 1e-5);
  EXPECT_NEAR(p[2], 1.0, 1e-6);  // zero gradient, no decay: unchanged
  EXPECT_NEAR(p[3], 1 - 0.1, 1e-5);
}

TEST(Optimizer, ClipScalesToMaxNorm) {
  auto backend = cpu_backend();
  OptimizerOptions o;
  o.grad_clip = 2.0;
  auto opt = Optimizer::create(*backend, 2, {}, o, nullptr);
  ASSERT_TRUE(opt.ok());
  auto params = engine::from_host(*backend, Shape{2}, std::vector<float>{0, 0});
  auto grads = engine::from_host(*backend, Shape{2}, std::vector<float>{3, 4});
  auto st = (*opt)->step(params, grads, 0.1);
  ASSERT_TRUE(st.ok());
  EXPECT_NEAR(st->grad_norm, 5.0, 1e-9);
  EXPECT_NEAR(st->clip_coef, 2.0 / (5.0 + 1e-6), 1e-12);
  const auto g = engine::to_host_f32(grads);
  EXPECT_NEAR(std::hypot(g[0], g[1]), 2.0, 1e-5);
}

TEST(Optimizer, NonFiniteGradientSkipsTheUpdate) {
  auto backend = cpu_backend();
  auto opt = Optimizer::create(*backend, 3, {}, OptimizerOptions{}, nullptr);
  ASSERT_TRUE(opt.ok());
  auto params = engine::from_host(*backend, Shape{3}, std::vector<float>{1, 2, 3});
  auto grads = engine::from_host(*backend, Shape{3}, std::vector<float>{1, NAN, 0});
  auto st = (*opt)->step(params, grads, 0.1);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->skipped);
  EXPECT_EQ((*opt)->step_count(), 0);
  EXPECT_EQ(engine::to_host_f32(params), (std::vector<float>{1, 2, 3}));
}

TEST(Optimizer, StateRoundTripAndMismatch) {
  auto backend = cpu_backend();
  auto a = Optimizer::create(*backend, 10, {}, OptimizerOptions{}, nullptr);
  auto b = Optimizer::create(*backend, 10, {}, OptimizerOptions{}, nullptr);
  auto c = Optimizer::create(*backend, 11, {}, OptimizerOptions{}, nullptr);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto params = engine::from_host(*backend, Shape{10}, initial_params(10));
  auto grads = engine::from_host(*backend, Shape{10}, grad_of(0, 0, 10));
  ASSERT_TRUE((*a)->step(params, grads, 0.1).ok());
  const OptimizerState s = (*a)->state();
  EXPECT_EQ(s.step, 1);
  ASSERT_TRUE((*b)->load_state(s).ok());
  EXPECT_EQ((*b)->state().m, s.m);
  EXPECT_EQ((*b)->step_count(), 1);
  Status bad = (*c)->load_state(s);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("trainer_num_workers"), std::string::npos) << bad.message();
}

TEST(Optimizer, RejectsBadOptionsAndRanges) {
  auto backend = cpu_backend();
  OptimizerOptions o;
  o.grad_clip = -1;
  EXPECT_FALSE(Optimizer::create(*backend, 4, {}, o, nullptr).ok());
  EXPECT_FALSE(Optimizer::create(*backend, 0, {}, OptimizerOptions{}, nullptr).ok());
  EXPECT_FALSE(Optimizer::create(*backend, 4, {{0, 3, true}, {2, 4, false}}, OptimizerOptions{}, nullptr).ok());
  EXPECT_FALSE(Optimizer::create(*backend, 4, {{0, 5, true}}, OptimizerOptions{}, nullptr).ok());
}

}  // namespace
}  // namespace rlrun::trainer
