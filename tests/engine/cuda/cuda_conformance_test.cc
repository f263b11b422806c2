// Every op of the CUDA backend against the CPU backend on the same inputs (ctest label `gpu`).
//
// Inputs are rounded to bf16 on the host first, so both backends see identical values and only
// the computation differs: the CPU computes in f32 from those values, CUDA in f32 from bf16
// tensors and rounds its bf16 outputs once. Errors are rel_error (op_test_util.h): the largest
// absolute difference over the largest |reference| (at least 1). Tolerances:
//   kOutBf16 = 1e-2   an output stored in bf16 (one rounding, 2^-9 relative, plus f32 order effects)
//   kChain   = 3e-2   bf16 outputs of chained steps (attention backward: p recomputed, then dS)
//   kStatF32 = 1e-4   f32 statistics and log-probs computed in f32 from identical inputs
//   kGradF32 = 1e-3   f32 parameter gradients summed over rows (atomics: order varies)
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

constexpr double kOutBf16 = 1e-2;
constexpr double kChain = 3e-2;
constexpr double kStatF32 = 1e-4;
constexpr double kGradF32 = 1e-3;

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

TEST_F(CudaConformance, MatmulAllTransposesBf16AndF32Outputs) {
  const int64_t m = 37, n = 45, k = 70;  // odd sizes: unaligned rows
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Vec a = rnd(m * k, 1), b = rnd(k * n, 2), init = rnd(m * n, 3);
      const Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n};
      Tensor want = cpu(Shape{m, n}, init);
      cpu_->matmul(want, cpu(sa, a), cpu(sb, b), ta, tb, 0.5f, 2.0f);
      Tensor got = gpu(Shape{m, n}, init);
      gpu_->matmul(got, gpu(sa, a), gpu(sb, b), ta, tb, 0.5f, 2.0f);
      EXPECT_CLOSE(host(got), host(want), kOutBf16) << "bf16 out, ta=" << ta << " tb=" << tb;
      Tensor got32 = gpu_f32(Shape{m, n}, init);  // f32 accumulation target (weight gradients)
      gpu_->matmul(got32, gpu(sa, a), gpu(sb, b), ta, tb, 0.5f, 2.0f);
      EXPECT_CLOSE(host(got32), host(want), kStatF32) << "f32 out, ta=" << ta << " tb=" << tb;
    }
}

TEST_F(CudaConformance, MatmulBetaZeroIgnoresNaNsAndRowViewsWork) {
  const int64_t k = 64, n = 48;
  const Vec a = rnd(10 * k, 4), b = rnd(n * k, 5);
  Tensor want = cpu(Shape{7, n}, Vec(7 * n, 0.0));
  cpu_->matmul(want, cpu(Shape{10, k}, a).rows(3, 10), cpu(Shape{n, k}, b), false, true);
  Tensor got = gpu(Shape{7, n}, Vec(7 * n, NAN));
  gpu_->matmul(got, gpu(Shape{10, k}, a).rows(3, 10), gpu(Shape{n, k}, b), false, true);  // offset 3 rows
  EXPECT_CLOSE(host(got), host(want), kOutBf16);
}

TEST_F(CudaConformance, ConvertRoundsLikeTheHost) {
  const Vec x = random_vec(1000, 6, -100, 100);  // not pre-rounded: exercises rounding
  Tensor b = gpu_->zeros(Shape{1000}, DType::kBF16);
  gpu_->convert(b, gpu_f32(Shape{1000}, x));
  const Vec got = host(b);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(static_cast<float>(x[i])))) << "element " << i;
}

TEST_F(CudaConformance, ElementwiseBf16AndF32) {
  const Vec a = rnd(300, 7), b = rnd(300, 8), bias = rnd(30, 9);
  for (bool f32 : {false, true}) {
    auto up = [&](const Vec& v, Shape s) { return f32 ? gpu_f32(s, v) : gpu(s, v); };
    Tensor ga = up(a, Shape{10, 30}), gb = up(b, Shape{10, 30}), gout = up(Vec(300, 0.0), Shape{10, 30});
    Tensor ca = cpu(Shape{10, 30}, a), cb = cpu(Shape{10, 30}, b), cout = cpu(Shape{10, 30}, Vec(300, 0.0));
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      const bool g = be == gpu_.get();
      be->add(g ? gout : cout, g ? ga : ca, g ? gb : cb);
      be->axpy(g ? ga : ca, -2.0f, g ? gb : cb);
      be->scale(g ? gb : cb, 3.0f);
    }
    const double tol = f32 ? 1e-6 : kOutBf16;
    EXPECT_CLOSE(host(gout), host(cout), tol) << "add, f32=" << f32;
    EXPECT_CLOSE(host(ga), host(ca), tol) << "axpy, f32=" << f32;
    EXPECT_CLOSE(host(gb), host(cb), tol) << "scale, f32=" << f32;
  }
  Tensor gout = gpu(Shape{10, 30}, a), cout = cpu(Shape{10, 30}, a);
  gpu_->add_bias(gout, gpu(Shape{30}, bias));
  cpu_->add_bias(cout, cpu(Shape{30}, bias));
  EXPECT_CLOSE(host(gout), host(cout), kOutBf16);
  Tensor gdb = gpu_f32(Shape{30}, bias), cdb = cpu(Shape{30}, bias);
  gpu_->add_bias_backward(gdb, gpu(Shape{10, 30}, a));
  cpu_->add_bias_backward(cdb, cpu(Shape{10, 30}, a));
  EXPECT_CLOSE(host(gdb), host(cdb), kGradF32);
}

TEST_F(CudaConformance, EmbeddingForwardAndBackward) {
  const int64_t vocab = 50, h = 40;
  const Vec table = rnd(vocab * h, 10), dout = rnd(6 * h, 11);
  const std::vector<int32_t> ids = {3, 0, 49, 3, 7, 3};  // repeated ids sum in backward
  Tensor gout = gpu_->zeros(Shape{6, h}, DType::kBF16), cout = cpu(Shape{6, h}, Vec(6 * h, 0.0));
  gpu_->embedding_forward(gout, gpu(Shape{vocab, h}, table), gpu_i32(Shape{6}, ids));
  cpu_->embedding_forward(cout, cpu(Shape{vocab, h}, table), cpu_i32(Shape{6}, ids));
  EXPECT_EQ(host(gout), host(cout));  // a gather is exact
  Tensor gdt = gpu_f32(Shape{vocab, h}, table), cdt = cpu(Shape{vocab, h}, table);
  gpu_->embedding_backward(gdt, gpu(Shape{6, h}, dout), gpu_i32(Shape{6}, ids));
  cpu_->embedding_backward(cdt, cpu(Shape{6, h}, dout), cpu_i32(Shape{6}, ids));
  EXPECT_CLOSE(host(gdt), host(cdt), kGradF32);
}

TEST_F(CudaConformance, EmbeddingIdOutsideTheVocabularyAbortsNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child cannot use the parent's CUDA context
  Tensor out = gpu_->zeros(Shape{2, 8}, DType::kBF16);
  EXPECT_DEATH(
      {
        gpu_->embedding_forward(out, gpu(Shape{4, 8}, rnd(32, 12)), gpu_i32(Shape{2}, {1, 4}));
        gpu_->synchronize();
      },
      "embedding_forward/backward: a token id outside");
}

TEST_F(CudaConformance, RmsNormForwardAndBackward) {
  const int64_t n = 19, h = 896;
  const Vec x = rnd(n * h, 13, -3, 3), w = rnd(h, 14), dout = rnd(n * h, 15), dw0 = rnd(h, 16);
  Tensor gout = gpu_->zeros(Shape{n, h}, DType::kBF16), grstd = gpu_->zeros(Shape{n}, DType::kF32);
  Tensor cout = cpu(Shape{n, h}, Vec(n * h, 0.0)), crstd = cpu(Shape{n}, Vec(n, 0.0));
  gpu_->rmsnorm_forward(gout, grstd, gpu(Shape{n, h}, x), gpu(Shape{h}, w), 1e-6f);
  cpu_->rmsnorm_forward(cout, crstd, cpu(Shape{n, h}, x), cpu(Shape{h}, w), 1e-6f);
  EXPECT_CLOSE(host(gout), host(cout), kOutBf16);
  EXPECT_CLOSE(host(grstd), host(crstd), kStatF32);
  Tensor gdx = gpu_->zeros(Shape{n, h}, DType::kBF16), gdw = gpu_f32(Shape{h}, dw0);
  Tensor cdx = cpu(Shape{n, h}, Vec(n * h, 0.0)), cdw = cpu(Shape{h}, dw0);
  gpu_->rmsnorm_backward(gdx, gdw, gpu(Shape{n, h}, dout), gpu(Shape{n, h}, x), gpu(Shape{h}, w), grstd);
  cpu_->rmsnorm_backward(cdx, cdw, cpu(Shape{n, h}, dout), cpu(Shape{n, h}, x), cpu(Shape{h}, w), crstd);
  EXPECT_CLOSE(host(gdx), host(cdx), kOutBf16);
  EXPECT_CLOSE(host(gdw), host(cdw), kGradF32);
}

TEST_F(CudaConformance, RopeForwardAndBackward) {
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
    EXPECT_CLOSE(host(g), host(c), kOutBf16) << "backward=" << backward;
  }
}

TEST_F(CudaConformance, SwigluForwardAndInPlaceBackward) {
  const int64_t n = 4864 + 3;
  const Vec gate = rnd(n, 18, -6, 6), up = rnd(n, 19), dout = rnd(n, 20);
  Tensor gout = gpu_->zeros(Shape{n}, DType::kBF16), cout = cpu(Shape{n}, Vec(n, 0.0));
  gpu_->swiglu_forward(gout, gpu(Shape{n}, gate), gpu(Shape{n}, up));
  cpu_->swiglu_forward(cout, cpu(Shape{n}, gate), cpu(Shape{n}, up));
  EXPECT_CLOSE(host(gout), host(cout), kOutBf16);
  Tensor gg = gpu(Shape{n}, gate), gu = gpu(Shape{n}, up), cg = cpu(Shape{n}, gate), cu = cpu(Shape{n}, up);
  gpu_->swiglu_backward(gg, gu, gpu(Shape{n}, dout), gg, gu);  // in place, as the model calls it
  cpu_->swiglu_backward(cg, cu, cpu(Shape{n}, dout), cg, cu);
  EXPECT_CLOSE(host(gg), host(cg), kOutBf16);
  EXPECT_CLOSE(host(gu), host(cu), kOutBf16);
}

TEST_F(CudaConformance, LogprobForwardAndInPlaceBackward) {
  const int64_t n = 6, vocab = 5003;
  const Vec logits = rnd(n * vocab, 21, -12, 12), dlp = rnd(n, 22), dent = rnd(n, 23);
  const std::vector<int32_t> targets = {0, 5002, -1, 17, 4000, 2};
  Tensor glp = gpu_->zeros(Shape{n}, DType::kF32), gent = gpu_->zeros(Shape{n}, DType::kF32),
         glse = gpu_->zeros(Shape{n}, DType::kF32);
  Tensor clp = cpu(Shape{n}, Vec(n, 0)), cent = cpu(Shape{n}, Vec(n, 0)), clse = cpu(Shape{n}, Vec(n, 0));
  Tensor gz = gpu(Shape{n, vocab}, logits), cz = cpu(Shape{n, vocab}, logits);
  gpu_->logprob_forward(glp, gent, glse, gz, gpu_i32(Shape{n}, targets));
  cpu_->logprob_forward(clp, cent, clse, cz, cpu_i32(Shape{n}, targets));
  EXPECT_CLOSE(host(glp), host(clp), kStatF32);
  EXPECT_CLOSE(host(gent), host(cent), kStatF32);
  EXPECT_CLOSE(host(glse), host(clse), kStatF32);
  for (bool with_entropy : {false, true}) {
    Tensor gz2 = gpu(Shape{n, vocab}, logits), cz2 = cpu(Shape{n, vocab}, logits);
    gpu_->logprob_backward(gz2, gz2, gpu_i32(Shape{n}, targets), glse, gent, gpu_f32(Shape{n}, dlp),
                           with_entropy ? gpu_f32(Shape{n}, dent) : Tensor());
    cpu_->logprob_backward(cz2, cz2, cpu_i32(Shape{n}, targets), clse, cent, cpu(Shape{n}, dlp),
                           with_entropy ? cpu(Shape{n}, dent) : Tensor());
    EXPECT_CLOSE(host(gz2), host(cz2), kOutBf16) << "with_entropy=" << with_entropy;
  }
}

TEST_F(CudaConformance, AdamwSeveralStepsAndSumSquares) {
  const int64_t n = 100003;
  const Vec p0 = random_vec(n, 24), m0(n, 0.0), v0(n, 0.0);
  Tensor gp = gpu_f32(Shape{n}, p0), gm = gpu_f32(Shape{n}, m0), gv = gpu_f32(Shape{n}, v0);
  Tensor cp = cpu(Shape{n}, p0), cm = cpu(Shape{n}, m0), cv = cpu(Shape{n}, v0);
  AdamWParams ap;
  ap.lr = 1e-3f;
  ap.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    const Vec g = random_vec(n, 100 + static_cast<uint32_t>(step));
    ap.step = step;
    gpu_->adamw_step(gp, gpu_f32(Shape{n}, g), gm, gv, ap);
    cpu_->adamw_step(cp, cpu(Shape{n}, g), cm, cv, ap);
  }
  EXPECT_CLOSE(host(gp), host(cp), 1e-6);
  EXPECT_CLOSE(host(gv), host(cv), 1e-6);
  const double want = cpu_->sum_squares(cp);
  EXPECT_NEAR(gpu_->sum_squares(gp), want, 1e-9 * want);
  Tensor gb = gpu_->zeros(Shape{n}, DType::kBF16);
  gpu_->convert(gb, gp);
  EXPECT_NEAR(gpu_->sum_squares(gb), want, 1e-2 * want);
}

// Packed attention: several sequences (one longer than a 32-key tile and than the 16-slot query
// tile), GQA, head dims 64 and 128.
struct AttnCase {
  std::vector<int32_t> cu;
  int64_t hq, hkv, d;
};

TEST_F(CudaConformance, AttentionForwardAndBackward) {
  for (const AttnCase& tc : {AttnCase{{0, 1, 70, 75, 200}, 14, 2, 64}, AttnCase{{0, 33, 40}, 4, 4, 128}}) {
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
    gpu_->attention_forward(gout, glse, gq, gk, gv, gcu, max_len);
    cpu_->attention_forward(cout, clse, cq, ck, cv, ccu, max_len);
    EXPECT_CLOSE(host(gout), host(cout), kOutBf16) << "d=" << tc.d;
    EXPECT_CLOSE(host(glse), host(clse), kStatF32 * 10) << "d=" << tc.d;  // scores from bf16 q.k in f32
    // Backward from the CPU's own out and lse on both sides (out rounded to bf16 for CUDA).
    const Vec out = bf16_round(host(cout));
    Tensor gdq = gpu_->zeros(qs, DType::kBF16), gdk = gpu_->zeros(ks, DType::kBF16), gdv = gpu_->zeros(ks, DType::kBF16);
    Tensor cdq = cpu(qs, Vec(qs.numel(), 0)), cdk = cpu(ks, Vec(ks.numel(), 0)), cdv = cpu(ks, Vec(ks.numel(), 0));
    gpu_->attention_backward(gdq, gdk, gdv, gpu(qs, dout), gq, gk, gv, gpu(qs, out), gpu_f32(Shape{n, tc.hq}, host(clse)),
                             gcu, max_len);
    cpu_->attention_backward(cdq, cdk, cdv, cpu(qs, dout), cq, ck, cv, cpu(qs, out), clse, ccu, max_len);
    EXPECT_CLOSE(host(gdq), host(cdq), kChain) << "dq d=" << tc.d;
    EXPECT_CLOSE(host(gdk), host(cdk), kChain) << "dk d=" << tc.d;
    EXPECT_CLOSE(host(gdv), host(cdv), kChain) << "dv d=" << tc.d;
  }
}

TEST_F(CudaConformance, AttentionLongerThanMaxSeqlenAbortsNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child cannot use the parent's CUDA context
  const Shape qs{40, 2, 64};
  Tensor out = gpu_->zeros(qs, DType::kBF16), q = gpu(qs, rnd(qs.numel(), 34));
  EXPECT_DEATH(
      {
        gpu_->attention_forward(out, Tensor(), q, q, q, gpu_i32(Shape{2}, {0, 40}), 16);
        gpu_->synchronize();
      },
      "attention: cu_seqlens");
}

// Paged: a prefill of 37 rows and a decode row, blocks of 16 slots in a scrambled order.
TEST_F(CudaConformance, PagedAttentionPrefillAndDecode) {
  const int64_t hq = 14, hkv = 2, d = 64, block = 16, num_blocks = 12, slots = num_blocks * block;
  const std::vector<int32_t> cu_q = {0, 37, 38}, seq_start = {0, 70};
  // (2, 5): sequence 0 (37 positions) uses 3 blocks, sequence 1 (71 positions) all 5.
  const std::vector<int32_t> table_rows = {5, 0, 9, 11, 4, 1, 3, 2, 7, 10};
  const Vec q = rnd(38 * hq * d, 35), kc = rnd(slots * hkv * d, 36), vc = rnd(slots * hkv * d, 37);
  const Shape qs{38, hq, d}, cs{slots, hkv, d};
  Tensor gout = gpu_->zeros(qs, DType::kBF16), cout = cpu(qs, Vec(qs.numel(), 0));
  gpu_->paged_attention_forward(gout, gpu(qs, q), gpu(cs, kc), gpu(cs, vc), gpu_i32(Shape{3}, cu_q),
                                gpu_i32(Shape{2}, seq_start), gpu_i32(Shape{2, 5}, table_rows), block, 71);
  cpu_->paged_attention_forward(cout, cpu(qs, q), cpu(cs, kc), cpu(cs, vc), cpu_i32(Shape{3}, cu_q),
                                cpu_i32(Shape{2}, seq_start), cpu_i32(Shape{2, 5}, table_rows), block, 71);
  EXPECT_CLOSE(host(gout), host(cout), kOutBf16);
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
