// What the CUDA backend owes beyond the op suite that runs on every backend (ops_forward_test.cc,
// ops_grad_test.cc, backend_contract_test.cc): cases compared with the CPU backend rather than a
// double reference (rotary angles at long positions follow the CPU's f32 convention; attention
// backward at real head dims, where finite differences would take minutes), bf16 rounding, this
// backend's own launch limits, its allocator, and a tiny model end to end (ctest label `gpu`).
//
// Inputs are rounded to bf16 on the host first, so both backends see identical values and only
// the computation differs. Errors are rel_error with the kBf16 tolerances of op_test_util.h.
// Without a device every test skips with "no CUDA device" (visible in ctest's output).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"
#include "tests/engine/op_test_util.h"
#ifdef RLRUN_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#endif

namespace rlrun::engine::testing {
namespace {

Vec bf16_round(Vec v) {
  for (double& x : v) x = bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
  return v;
}

// Random values already representable in bf16.
Vec rnd(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) { return bf16_round(random_vec(n, seed, lo, hi)); }

class CudaConformance : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef RLRUN_HAVE_CUDA
    GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (nvcc was absent at configure time)";
#else
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto g = create_backend("cuda");
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gpu_ = std::move(g.value());
    cpu_ = std::make_unique<cpu::CpuBackend>(2);
#endif
  }

  Tensor cpu(Shape s, const Vec& v) { return from_host(*cpu_, s, std::vector<float>(v.begin(), v.end())); }
  Tensor gpu_f32(Shape s, const Vec& v) { return from_host(*gpu_, s, std::vector<float>(v.begin(), v.end())); }
  Tensor gpu(Shape s, const Vec& v) {  // bf16
    Tensor t = gpu_->zeros(s, DType::kBF16);
    gpu_->convert(t, gpu_f32(s, v));
    return t;
  }
  Tensor cpu_i32(Shape s, const std::vector<int32_t>& v) { return from_host_i32(*cpu_, s, v); }
  Tensor gpu_i32(Shape s, const std::vector<int32_t>& v) { return from_host_i32(*gpu_, s, v); }
  static Vec host(const Tensor& t) {
    std::vector<float> f = to_host_f32(t);
    return Vec(f.begin(), f.end());
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaConformance, ConvertRoundsLikeTheHost) {
  const Vec x = random_vec(1000, 6, -100, 100);  // not pre-rounded: exercises rounding
  Tensor b = gpu_->zeros(Shape{1000}, DType::kBF16);
  gpu_->convert(b, gpu_f32(Shape{1000}, x));
  const Vec got = host(b);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(static_cast<float>(x[i])))) << "element " << i;
}

// Positions far beyond op_reference.h's double-precision angles: the CPU's f32 convention (HF's).
TEST_F(CudaConformance, RopeAtLongPositionsMatchesTheCpu) {
  const int64_t h = 3, d = 64;
  const std::vector<int32_t> pos = {0, 1, 2, 3, 0, 1, 4095, 0, 31000};  // restarts and long contexts
  const int64_t n = static_cast<int64_t>(pos.size());
  const Vec x = rnd(n * h * d, 17);
  for (bool backward : {false, true}) {
    Tensor g = gpu(Shape{n, h, d}, x), c = cpu(Shape{n, h, d}, x);
    if (backward) {
      gpu_->rope_backward(g, gpu_i32(Shape{n}, pos), 1e6f);
      cpu_->rope_backward(c, cpu_i32(Shape{n}, pos), 1e6f);
    } else {
      gpu_->rope_forward(g, gpu_i32(Shape{n}, pos), 1e6f);
      cpu_->rope_forward(c, cpu_i32(Shape{n}, pos), 1e6f);
    }
    EXPECT_CLOSE(host(g), host(c), kBf16Out) << "backward=" << backward;
  }
}

// Packed attention at real sizes: several sequences (one longer than a 32-key tile and than the
// 16-slot query tile), GQA, head dims 64 and 128, and sliding windows (Gemma 3's local layers)
// shorter than a key tile and longer than one; the backward from the CPU's own out and lse.
struct AttnCase {
  std::vector<int32_t> cu;
  int64_t hq, hkv, d, window = 0;
};

TEST_F(CudaConformance, AttentionForwardAndBackwardAtRealSizes) {
  for (const AttnCase& tc : {AttnCase{{0, 1, 70, 75, 200}, 14, 2, 64}, AttnCase{{0, 33, 40}, 4, 4, 128},
                             AttnCase{{0, 1, 70, 75, 200}, 8, 2, 64, 5}, AttnCase{{0, 100, 140}, 4, 2, 128, 40}}) {
    const int64_t n = tc.cu.back(), s = static_cast<int64_t>(tc.cu.size()) - 1;
    int64_t max_len = 0;
    for (int64_t i = 0; i < s; ++i) max_len = std::max<int64_t>(max_len, tc.cu[i + 1] - tc.cu[i]);
    const Shape qs{n, tc.hq, tc.d}, ks{n, tc.hkv, tc.d};
    const Vec q = rnd(n * tc.hq * tc.d, 30, -2, 2), k = rnd(n * tc.hkv * tc.d, 31, -2, 2),
              v = rnd(n * tc.hkv * tc.d, 32), dout = rnd(n * tc.hq * tc.d, 33);
    Tensor gout = gpu_->zeros(qs, DType::kBF16), glse = gpu_->zeros(Shape{n, tc.hq}, DType::kF32);
    Tensor cout = cpu(qs, Vec(qs.numel(), 0)), clse = cpu(Shape{n, tc.hq}, Vec(n * tc.hq, 0));
    Tensor gq = gpu(qs, q), gk = gpu(ks, k), gv = gpu(ks, v), gcu = gpu_i32(Shape{s + 1}, tc.cu);
    Tensor cq = cpu(qs, q), ck = cpu(ks, k), cv = cpu(ks, v), ccu = cpu_i32(Shape{s + 1}, tc.cu);
    gpu_->attention_forward(gout, glse, gq, gk, gv, gcu, max_len, tc.window);
    cpu_->attention_forward(cout, clse, cq, ck, cv, ccu, max_len, tc.window);
    EXPECT_CLOSE(host(gout), host(cout), kBf16Out) << "d=" << tc.d << " window " << tc.window;
    EXPECT_CLOSE(host(glse), host(clse), kBf16AttentionLse) << "d=" << tc.d << " window " << tc.window;
    // Backward from the CPU's own out and lse on both sides (out rounded to bf16 for CUDA).
    const Vec out = bf16_round(host(cout));
    Tensor gdq = gpu_->zeros(qs, DType::kBF16), gdk = gpu_->zeros(ks, DType::kBF16), gdv = gpu_->zeros(ks, DType::kBF16);
    Tensor cdq = cpu(qs, Vec(qs.numel(), 0)), cdk = cpu(ks, Vec(ks.numel(), 0)), cdv = cpu(ks, Vec(ks.numel(), 0));
    gpu_->attention_backward(gdq, gdk, gdv, gpu(qs, dout), gq, gk, gv, gpu(qs, out), gpu_f32(Shape{n, tc.hq}, host(clse)),
                             gcu, max_len, tc.window);
    cpu_->attention_backward(cdq, cdk, cdv, cpu(qs, dout), cq, ck, cv, cpu(qs, out), clse, ccu, max_len, tc.window);
    EXPECT_CLOSE(host(gdq), host(cdq), kBf16Chain) << "dq d=" << tc.d << " window " << tc.window;
    EXPECT_CLOSE(host(gdk), host(cdk), kBf16Chain) << "dk d=" << tc.d << " window " << tc.window;
    EXPECT_CLOSE(host(gdv), host(cdv), kBf16Chain) << "dv d=" << tc.d << " window " << tc.window;
  }
}

// Limits of this backend's kernels abort naming the op, before any launch.
TEST_F(CudaConformance, LaunchLimitsAbortNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child cannot use the parent's CUDA context
  const int64_t h = 16385;  // kRmsNormMaxHidden + 1
  Tensor x = gpu_->zeros(Shape{1, h}, DType::kBF16), dx = gpu_->zeros(Shape{1, h}, DType::kBF16);
  Tensor w = gpu_->zeros(Shape{h}, DType::kBF16), dw = gpu_->zeros(Shape{h}, DType::kF32);
  Tensor rstd = gpu_->zeros(Shape{1}, DType::kF32);
  EXPECT_DEATH(gpu_->rmsnorm_backward(dx, dw, x, x, w, rstd), "rmsnorm_backward: hidden size 16385 > 16384");
  const Shape qs{2, 1, 264};  // head dim > kAttentionMaxHeadDim (256)
  Tensor q = gpu_->zeros(qs, DType::kBF16), out = gpu_->zeros(qs, DType::kBF16);
  EXPECT_DEATH(gpu_->attention_forward(out, Tensor(), q, q, q, gpu_i32(Shape{2}, {0, 2}), 2),
               "attention_forward: head dim 264 \\(at most 256 on CUDA\\)");
}

// End to end: the tiny Llama and Qwen2 of model_test_util.h, forward and backward on both
// backends with the same (bf16-representable) weights: per-token log-probs, entropies and the
// whole f32 gradient. bf16 activations through two layers: 3e-2 relative (expect_near_all).
TEST_F(CudaConformance, TinyModelLogprobsAndGradientsMatchTheCpu) {
  for (bool qwen2 : {false, true}) {
    auto cm = tiny_model(*cpu_, qwen2);
    std::vector<float> master = to_host_f32(cm->weights().master_flat());
    for (float& x : master) x = bf16_to_f32(f32_to_bf16(x));
    cpu_->copy_from_host(cm->weights().master_flat(), master.data(), master.size() * 4);
    cm->weights().sync_compute();
    auto gm_r = Model::create(*gpu_, tiny_config(qwen2));
    ASSERT_TRUE(gm_r.ok()) << gm_r.status().to_string();
    auto gm = std::move(gm_r).value();
    gpu_->copy_from_host(gm->weights().master_flat(), master.data(), master.size() * 4);
    gm->weights().sync_compute();
    std::mt19937 rng(5);
    HostBatch hb;
    for (size_t len : {5u, 40u, 1u, 23u}) {
      const auto toks = random_ids(rng, len, 64);
      hb.add_sequence(toks, shifted_targets(toks));
    }
    auto cf = cm->forward(hb.batch());
    auto gf = gm->forward(hb.batch());
    ASSERT_TRUE(cf.ok() && gf.ok());
    expect_near_all(to_host_f32(gf->logprobs), to_host_f32(cf->logprobs), 3e-2f, "logprobs");
    expect_near_all(to_host_f32(gf->entropy), to_host_f32(cf->entropy), 3e-2f, "entropy");
    const int64_t n = static_cast<int64_t>(hb.tokens.size());
    const std::vector<float> dlp(static_cast<size_t>(n), -1.0f / static_cast<float>(n));
    cm->backward(from_host(*cpu_, Shape{n}, dlp));
    gm->backward(from_host(*gpu_, Shape{n}, dlp));
    const std::vector<float> cg = to_host_f32(cm->weights().grad_flat()), gg = to_host_f32(gm->weights().grad_flat());
    const float scale = std::max(1e-6f, *std::max_element(cg.begin(), cg.end(), [](float a, float b) {
      return std::fabs(a) < std::fabs(b);
    }));
    std::vector<float> cgs(cg.size()), ggs(gg.size());
    for (size_t i = 0; i < cg.size(); ++i) {
      cgs[i] = cg[i] / std::fabs(scale);
      ggs[i] = gg[i] / std::fabs(scale);
    }
    expect_near_all(ggs, cgs, 3e-2f, qwen2 ? "qwen2 gradient / max |gradient|" : "llama gradient / max |gradient|");
  }
}

#ifdef RLRUN_HAVE_CUDA
TEST_F(CudaConformance, AllocatorStatisticsFollowTensors) {
  auto* backend = dynamic_cast<cuda::CudaBackend*>(gpu_.get());
  ASSERT_NE(backend, nullptr);
  const AllocatorStats before = backend->memory_stats();
  {
    Tensor big = gpu_->zeros(Shape{int64_t{64} << 20}, DType::kBF16);  // 128 MiB
    const AllocatorStats during = backend->memory_stats();
    EXPECT_EQ(during.allocated, before.allocated + (size_t{128} << 20));
    EXPECT_GE(during.reserved, during.allocated);
    EXPECT_EQ(host(big.rows(0, 1000)), Vec(1000, 0.0));  // zeros() zeroes
  }
  const AllocatorStats after = backend->memory_stats();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.peak_allocated, before.allocated + (size_t{128} << 20));
  EXPECT_GE(backend->empty_cache(), size_t{128} << 20);
}
#endif

}  // namespace
}  // namespace rlrun::engine::testing
