// Backward ops of every backend against central finite differences.
//
// The scalar loss is L = sum(w * f(inputs)) with fixed random weights w (the upstream gradient).
// Its finite differences are taken on the double-precision reference forward (op_reference.h,
// itself checked against the backend's forward in ops_forward_test.cc), with step 1e-5, so the
// reference gradient is accurate to ~1e-9; the backend's analytic gradient must match it within
// rel_error <= 1e-4 on f32 backends, the kBf16 tolerances (op_test_util.h) on bf16 ones: kBf16Out
// for gradients stored in bf16, kBf16Grad for f32 parameter gradients. Inputs are representable
// in the compute dtype (random_input), so the reference differentiates at the backend's point.
// Parameter gradients must ACCUMULATE: they start from a known non-zero value.
#include "tests/engine/op_test_util.h"

namespace rlrun::engine::testing {
namespace {

using OpsGrad = BackendTest;
constexpr double kTol = 1e-4;

Vec plus(const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// The documented linear-layer recipe: y = x W^T, dx = dy W, dW += dy^T x.
TEST_P(OpsGrad, LinearViaMatmul) {
  const int64_t t = 4, in = 5, out = 3;
  const Vec x = random_input(t * in, 1), w = random_input(out * in, 2), dy = random_input(t * out, 3),
            dw0 = random_input(out * in, 4);
  auto loss_x = [&](const Vec& xx) { return dot(dy, ref_matmul(xx, w, t, out, in, false, true)); };
  auto loss_w = [&](const Vec& ww) { return dot(dy, ref_matmul(x, ww, t, out, in, false, true)); };
  Tensor dx = zeros(Shape{t, in}), dw = upload_f32(Shape{out, in}, dw0);
  be().matmul(dx, upload(Shape{t, out}, dy), upload(Shape{out, in}, w), false, false);
  be().matmul(dw, upload(Shape{t, out}, dy), upload(Shape{t, in}, x), true, false, 1.0f, 1.0f);
  EXPECT_CLOSE(download(dx), finite_diff(loss_x, x), tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(dw), plus(dw0, finite_diff(loss_w, w)), tol(kTol, kBf16Grad));
}

TEST_P(OpsGrad, BiasAccumulates) {
  const Vec dy = random_input(12, 5), db0 = {1, 2, 3};
  Tensor db = upload_f32(Shape{3}, db0);
  be().add_bias_backward(db, upload(Shape{4, 3}, dy));
  Vec want = db0;
  for (int i = 0; i < 12; ++i) want[i % 3] += dy[i];
  EXPECT_CLOSE(download(db), want, tol(kTol, kBf16Grad));
}

TEST_P(OpsGrad, EmbeddingScatterAddsRepeatedIds) {
  const int64_t vocab = 5, h = 3;
  const std::vector<int32_t> ids = {4, 1, 4, 4, 0};
  const Vec table = random_input(vocab * h, 6), dy = random_input(5 * h, 7), dt0 = random_input(vocab * h, 8);
  auto loss = [&](const Vec& tab) {
    double s = 0.0;
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < h; ++c) s += dy[i * h + c] * tab[ids[i] * h + c];
    return s;
  };
  Tensor dt = upload_f32(Shape{vocab, h}, dt0);
  be().embedding_backward(dt, upload(Shape{5, h}, dy), upload_i32(Shape{5}, ids));
  EXPECT_CLOSE(download(dt), plus(dt0, finite_diff(loss, table)), tol(kTol, kBf16Grad));
}

TEST_P(OpsGrad, RmsNorm) {
  const int64_t n = 3, h = 10;
  const double eps = 1e-5;
  const Vec x = random_input(n * h, 9, -2, 2), w = random_input(h, 10), dy = random_input(n * h, 11),
            dw0 = random_input(h, 12);
  Tensor tx = upload(Shape{n, h}, x), tw = upload(Shape{h}, w), out = zeros(Shape{n, h}), rstd = zeros_f32(Shape{n});
  be().rmsnorm_forward(out, rstd, tx, tw, static_cast<float>(eps));
  Tensor dx = zeros(Shape{n, h}), dw = upload_f32(Shape{h}, dw0);
  be().rmsnorm_backward(dx, dw, upload(Shape{n, h}, dy), tx, tw, rstd);
  auto loss_x = [&](const Vec& xx) { return dot(dy, ref_rmsnorm(xx, w, n, h, eps)); };
  auto loss_w = [&](const Vec& ww) { return dot(dy, ref_rmsnorm(x, ww, n, h, eps)); };
  EXPECT_CLOSE(download(dx), finite_diff(loss_x, x), tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(dw), plus(dw0, finite_diff(loss_w, w)), tol(kTol, kBf16Grad));
}

// Gemma's (1 + w) norms: the gain is offset + w, the weight gradient the same as without it.
TEST_P(OpsGrad, RmsNormWithWeightOffset) {
  const int64_t n = 3, h = 10;
  const double eps = 1e-6;
  const Vec x = random_input(n * h, 29, -2, 2), w = random_input(h, 30, -0.3, 0.3), dy = random_input(n * h, 31);
  Vec gain = w;
  for (double& g : gain) g += 1.0;
  Tensor tx = upload(Shape{n, h}, x), tw = upload(Shape{h}, w), out = zeros(Shape{n, h}), rstd = zeros_f32(Shape{n});
  be().rmsnorm_forward(out, rstd, tx, tw, static_cast<float>(eps), 1.0f);
  EXPECT_CLOSE(download(out), ref_rmsnorm(x, gain, n, h, eps), tol(1e-5, kBf16Out));
  Tensor dx = zeros(Shape{n, h}), dw = zeros_f32(Shape{h});
  be().rmsnorm_backward(dx, dw, upload(Shape{n, h}, dy), tx, tw, rstd, 1.0f);
  auto loss_x = [&](const Vec& xx) { return dot(dy, ref_rmsnorm(xx, gain, n, h, eps)); };
  auto loss_w = [&](const Vec& gg) { return dot(dy, ref_rmsnorm(x, gg, n, h, eps)); };
  EXPECT_CLOSE(download(dx), finite_diff(loss_x, x), tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(dw), finite_diff(loss_w, gain), tol(kTol, kBf16Grad));
}

TEST_P(OpsGrad, GeGluIncludingInPlace) {
  const Vec g = random_input(12, 32, -5, 5), u = random_input(12, 33), dy = random_input(12, 34);
  Tensor out = zeros(Shape{3, 4});
  be().geglu_forward(out, upload(Shape{3, 4}, g), upload(Shape{3, 4}, u));
  EXPECT_CLOSE(download(out), ref_geglu(g, u), tol(1e-6, kBf16Out));
  auto loss_g = [&](const Vec& x) { return dot(dy, ref_geglu(x, u)); };
  auto loss_u = [&](const Vec& x) { return dot(dy, ref_geglu(g, x)); };
  const Vec want_g = finite_diff(loss_g, g), want_u = finite_diff(loss_u, u);
  Tensor tg = upload(Shape{3, 4}, g), tu = upload(Shape{3, 4}, u), tdy = upload(Shape{3, 4}, dy);
  Tensor dg = zeros(Shape{3, 4}), du = zeros(Shape{3, 4});
  be().geglu_backward(dg, du, tdy, tg, tu);
  EXPECT_CLOSE(download(dg), want_g, tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(du), want_u, tol(kTol, kBf16Out));
  be().geglu_backward(tg, tu, tdy, tg, tu);  // documented aliasing: gradients over the inputs
  EXPECT_CLOSE(download(tg), want_g, tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(tu), want_u, tol(kTol, kBf16Out));
}

TEST_P(OpsGrad, Rope) {
  const int64_t h = 2, d = 6;
  const std::vector<int32_t> pos = {0, 1, 2, 0, 9};
  const int64_t n = static_cast<int64_t>(pos.size());
  const Vec x = random_input(n * h * d, 13), dy = random_input(n * h * d, 14);
  Tensor g = upload(Shape{n, h, d}, dy);
  be().rope_backward(g, upload_i32(Shape{n}, pos), 10000.0f);
  auto loss = [&](const Vec& xx) { return dot(dy, ref_rope(xx, pos, h, d, 10000.0)); };
  EXPECT_CLOSE(download(g), finite_diff(loss, x), tol(kTol, kBf16Out));
}

TEST_P(OpsGrad, AttentionPackedGqa) {
  const std::vector<int32_t> cu = {0, 3, 4, 8};
  const int64_t n = 8, hq = 4, hkv = 2, d = 4;
  const Vec q = random_input(n * hq * d, 15, -2, 2), k = random_input(n * hkv * d, 16, -2, 2),
            v = random_input(n * hkv * d, 17), dy = random_input(n * hq * d, 18);
  Tensor tq = upload(Shape{n, hq, d}, q), tk = upload(Shape{n, hkv, d}, k), tv = upload(Shape{n, hkv, d}, v),
         cus = upload_i32(Shape{4}, cu), out = zeros(Shape{n, hq, d}), lse = zeros_f32(Shape{n, hq});
  be().attention_forward(out, lse, tq, tk, tv, cus, 4);
  // dq/dk/dv start as garbage: the backward must overwrite them.
  Tensor dq = upload(Shape{n, hq, d}, Vec(n * hq * d, 9.0)), dk = upload(Shape{n, hkv, d}, Vec(n * hkv * d, 9.0)),
         dv = upload(Shape{n, hkv, d}, Vec(n * hkv * d, 9.0));
  be().attention_backward(dq, dk, dv, upload(Shape{n, hq, d}, dy), tq, tk, tv, out, lse, cus, 4);
  auto loss_q = [&](const Vec& x) { return dot(dy, ref_attention(x, k, v, cu, hq, hkv, d)); };
  auto loss_k = [&](const Vec& x) { return dot(dy, ref_attention(q, x, v, cu, hq, hkv, d)); };
  auto loss_v = [&](const Vec& x) { return dot(dy, ref_attention(q, k, x, cu, hq, hkv, d)); };
  EXPECT_CLOSE(download(dq), finite_diff(loss_q, q), tol(kTol, kBf16Chain));
  EXPECT_CLOSE(download(dk), finite_diff(loss_k, k), tol(kTol, kBf16Chain));
  EXPECT_CLOSE(download(dv), finite_diff(loss_v, v), tol(kTol, kBf16Chain));
}

// q_begin: the leading rows of a sequence are keys and values only (a shared prefix's copy before
// a continuation): their output gradient is zero, the other rows' outputs and every gradient are
// those of the whole attention (the backend may skip them as queries; dq rows there are zero).
TEST_P(OpsGrad, AttentionRowsBeforeQBeginAreKeysOnly) {
  const std::vector<int32_t> cu = {0, 6, 9, 14}, first = {2, 0, 5};
  const int64_t n = 14, hq = 4, hkv = 2, d = 4;
  const Vec q = random_input(n * hq * d, 31, -2, 2), k = random_input(n * hkv * d, 32, -2, 2),
            v = random_input(n * hkv * d, 33);
  Vec dy = random_input(n * hq * d, 34);
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t i = cu[s]; i < cu[s] + first[s]; ++i) std::fill_n(dy.begin() + i * hq * d, hq * d, 0.0);
  Tensor tq = upload(Shape{n, hq, d}, q), tk = upload(Shape{n, hkv, d}, k), tv = upload(Shape{n, hkv, d}, v),
         cus = upload_i32(Shape{4}, cu), qb = upload_i32(Shape{3}, first), out = zeros(Shape{n, hq, d}),
         lse = zeros_f32(Shape{n, hq});
  be().attention_forward(out, lse, tq, tk, tv, cus, 6, 0, qb);
  const Vec want = ref_attention(q, k, v, cu, hq, hkv, d), got = download(out);
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t i = (cu[s] + first[s]) * hq * d; i < cu[s + 1] * hq * d; ++i)
      EXPECT_NEAR(got[i], want[i], tol(1e-5, kBf16Out)) << "output element " << i;
  Tensor dq = upload(Shape{n, hq, d}, Vec(n * hq * d, 9.0)), dk = upload(Shape{n, hkv, d}, Vec(n * hkv * d, 9.0)),
         dv = upload(Shape{n, hkv, d}, Vec(n * hkv * d, 9.0));
  be().attention_backward(dq, dk, dv, upload(Shape{n, hq, d}, dy), tq, tk, tv, out, lse, cus, 6, 0, qb);
  auto loss_q = [&](const Vec& x) { return dot(dy, ref_attention(x, k, v, cu, hq, hkv, d)); };
  auto loss_k = [&](const Vec& x) { return dot(dy, ref_attention(q, x, v, cu, hq, hkv, d)); };
  auto loss_v = [&](const Vec& x) { return dot(dy, ref_attention(q, k, x, cu, hq, hkv, d)); };
  EXPECT_CLOSE(download(dq), finite_diff(loss_q, q), tol(kTol, kBf16Chain));
  EXPECT_CLOSE(download(dk), finite_diff(loss_k, k), tol(kTol, kBf16Chain));
  EXPECT_CLOSE(download(dv), finite_diff(loss_v, v), tol(kTol, kBf16Chain));
}

TEST_P(OpsGrad, AttentionSlidingWindow) {
  const std::vector<int32_t> cu = {0, 2, 9};
  const int64_t n = 9, hq = 2, hkv = 1, d = 4, window = 3;
  const Vec q = random_input(n * hq * d, 44, -2, 2), k = random_input(n * hkv * d, 45, -2, 2),
            v = random_input(n * hkv * d, 46), dy = random_input(n * hq * d, 47);
  Tensor tq = upload(Shape{n, hq, d}, q), tk = upload(Shape{n, hkv, d}, k), tv = upload(Shape{n, hkv, d}, v),
         cus = upload_i32(Shape{3}, cu), out = zeros(Shape{n, hq, d}), lse = zeros_f32(Shape{n, hq});
  be().attention_forward(out, lse, tq, tk, tv, cus, 7, window);
  Tensor dq = zeros(Shape{n, hq, d}), dk = zeros(Shape{n, hkv, d}), dv = zeros(Shape{n, hkv, d});
  be().attention_backward(dq, dk, dv, upload(Shape{n, hq, d}, dy), tq, tk, tv, out, lse, cus, 7, window);
  auto loss_q = [&](const Vec& x) { return dot(dy, ref_attention(x, k, v, cu, hq, hkv, d, nullptr, window)); };
  auto loss_k = [&](const Vec& x) { return dot(dy, ref_attention(q, x, v, cu, hq, hkv, d, nullptr, window)); };
  auto loss_v = [&](const Vec& x) { return dot(dy, ref_attention(q, k, x, cu, hq, hkv, d, nullptr, window)); };
  EXPECT_CLOSE(download(dq), finite_diff(loss_q, q), tol(kTol, kBf16Chain));
  EXPECT_CLOSE(download(dk), finite_diff(loss_k, k), tol(kTol, kBf16Chain));
  EXPECT_CLOSE(download(dv), finite_diff(loss_v, v), tol(kTol, kBf16Chain));
}

TEST_P(OpsGrad, SwiGluIncludingInPlace) {
  const Vec g = random_input(12, 19, -5, 5), u = random_input(12, 20), dy = random_input(12, 21);
  auto loss_g = [&](const Vec& x) { return dot(dy, ref_swiglu(x, u)); };
  auto loss_u = [&](const Vec& x) { return dot(dy, ref_swiglu(g, x)); };
  const Vec want_g = finite_diff(loss_g, g), want_u = finite_diff(loss_u, u);
  Tensor tg = upload(Shape{3, 4}, g), tu = upload(Shape{3, 4}, u), tdy = upload(Shape{3, 4}, dy);
  Tensor dg = zeros(Shape{3, 4}), du = zeros(Shape{3, 4});
  be().swiglu_backward(dg, du, tdy, tg, tu);
  EXPECT_CLOSE(download(dg), want_g, tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(du), want_u, tol(kTol, kBf16Out));
  be().swiglu_backward(tg, tu, tdy, tg, tu);  // documented aliasing: gradients over the inputs
  EXPECT_CLOSE(download(tg), want_g, tol(kTol, kBf16Out));
  EXPECT_CLOSE(download(tu), want_u, tol(kTol, kBf16Out));
}

// Many parallel chunks (the CPU backend's are 4096 elements) and gates far into both tails,
// against the closed form: d up = dy silu(g), d gate = dy up sig(g) (1 + g (1 - sig(g))).
TEST_P(OpsGrad, SwiGluOverManyChunksMatchesClosedForm) {
  const Shape shape{3, 4099};
  const int64_t n = shape.numel();
  const Vec g = random_input(n, 25, -40, 40), u = random_input(n, 26), dy = random_input(n, 27);
  Vec want_g(n), want_u(n);
  for (int64_t i = 0; i < n; ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-g[i]));
    want_u[i] = dy[i] * g[i] * sig;
    want_g[i] = dy[i] * u[i] * sig * (1.0 + g[i] * (1.0 - sig));
  }
  Tensor dg = zeros(shape), du = zeros(shape);
  be().swiglu_backward(dg, du, upload(shape, dy), upload(shape, g), upload(shape, u));
  EXPECT_CLOSE(download(dg), want_g, tol(1e-5, kBf16Out));
  EXPECT_CLOSE(download(du), want_u, tol(1e-5, kBf16Out));
}

// L = sum a_n logprob_n + b_n entropy_n, with dlogits written over the logits (in place).
TEST_P(OpsGrad, LogprobAndEntropyInPlace) {
  const int64_t n = 4, v = 9;
  const std::vector<int32_t> targets = {2, -1, 8, 0};
  const Vec logits = random_input(n * v, 22, -3, 3), a = random_input(n, 23), b = random_input(n, 24);
  auto loss = [&](const Vec& z) {
    Vec lp, ent;
    ref_logprob(z, targets, v, &lp, &ent);
    return dot(a, lp) + dot(b, ent);
  };
  Tensor tz = upload(Shape{n, v}, logits), tt = upload_i32(Shape{n}, targets);
  Tensor lp = zeros_f32(Shape{n}), ent = zeros_f32(Shape{n}), lse = zeros_f32(Shape{n});
  be().logprob_forward(lp, ent, lse, tz, tt);
  be().logprob_backward(tz, tz, tt, lse, ent, upload_f32(Shape{n}, a), upload_f32(Shape{n}, b));
  EXPECT_CLOSE(download(tz), finite_diff(loss, logits), tol(kTol, kBf16Out));
}

TEST_P(OpsGrad, LogprobWithoutEntropyGradient) {
  const int64_t n = 3, v = 5;
  const std::vector<int32_t> targets = {4, 0, 2};
  const Vec logits = random_input(n * v, 25, -3, 3), a = random_input(n, 26);
  auto loss = [&](const Vec& z) {
    Vec lp, ent;
    ref_logprob(z, targets, v, &lp, &ent);
    return dot(a, lp);
  };
  Tensor tz = upload(Shape{n, v}, logits), tt = upload_i32(Shape{n}, targets), dz = zeros(Shape{n, v});
  Tensor lp = zeros_f32(Shape{n}), ent = zeros_f32(Shape{n}), lse = zeros_f32(Shape{n});
  be().logprob_forward(lp, ent, lse, tz, tt);
  be().logprob_backward(dz, tz, tt, lse, ent, upload_f32(Shape{n}, a), Tensor());
  EXPECT_CLOSE(download(dz), finite_diff(loss, logits), tol(kTol, kBf16Out));
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsGrad, ::testing::ValuesIn(backends_under_test()), backend_param_name);

}  // namespace
}  // namespace rlrun::engine::testing
