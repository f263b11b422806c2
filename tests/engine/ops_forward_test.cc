// Forward ops of every backend against double-precision references (op_reference.h), on inputs
// the compute dtype holds exactly (random_input). Tolerance: error relative to the reference's
// largest magnitude (rel_error) <= 1e-5 on f32 backends (most ops are exact to a few ulps;
// attention and logprob accumulate in f32); bf16 backends: the kBf16 constants (op_test_util.h).
#include <algorithm>
#include <cstring>

#include "tests/engine/op_test_util.h"

namespace rlrun::engine::testing {
namespace {

using OpsForward = BackendTest;

// Every dtype combination the contract allows: a and b alike (compute dtype or f32), out a's
// dtype or f32 (f32 weight gradients from bf16 activations).
TEST_P(OpsForward, MatmulAllTransposesAndDtypesWithAlphaBeta) {
  const int64_t m = 5, n = 7, k = 3;
  for (DType ab : float_dtypes())
    for (DType od : float_dtypes()) {
      if (od != ab && od != DType::kF32) continue;
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const Vec a = random_input(m * k, 1), b = random_input(k * n, 2), init = random_input(m * n, 3);
          Tensor out = upload_as(od, Shape{m, n}, init);
          be().matmul(out, upload_as(ab, ta ? Shape{k, m} : Shape{m, k}, a),
                      upload_as(ab, tb ? Shape{n, k} : Shape{k, n}, b), ta, tb, 0.5f, 2.0f);
          Vec want = ref_matmul(a, b, m, n, k, ta, tb);
          for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * init[i];
          EXPECT_CLOSE(download(out), want, tol(1e-5, od == DType::kBF16 ? kBf16Out : kBf16Stat))
              << "a, b " << dtype_name(ab) << ", out " << dtype_name(od) << ", ta=" << ta << " tb=" << tb;
        }
    }
}

// Products large enough for the CPU backend to split into blocks of rows (m >= n) or columns,
// each transpose, with alpha and beta, sizes not multiples of the blocks.
TEST_P(OpsForward, MatmulLargeEnoughToSplitAllTransposes) {
  struct Dims { int64_t m, n, k; };
  for (const Dims d : {Dims{203, 75, 161}, Dims{41, 301, 199}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Vec a = random_input(d.m * d.k, 4), b = random_input(d.k * d.n, 5), init = random_input(d.m * d.n, 6);
        Tensor out = upload(Shape{d.m, d.n}, init);
        be().matmul(out, upload(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, a),
                    upload(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, b), ta, tb, 0.5f, 2.0f);
        Vec want = ref_matmul(a, b, d.m, d.n, d.k, ta, tb);
        for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * init[i];
        EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out)) << d.m << "x" << d.n << "x" << d.k << " ta=" << ta << " tb=" << tb;
      }
}

// x W^T with few rows, as a forward layer computes it: every remainder of the CPU backend's
// few-rows kernel (engine/cpu/cpu_gemm_nt.h: tiles of 4 x 6 and 16 lanes of k with AVX-512, 3 x 4
// and 8 lanes with AVX2) and both sides of its
// row limit, with alpha and beta.
TEST_P(OpsForward, MatmulFewRowsAgainstWeightsEveryTileRemainder) {
  for (int64_t m : {1, 2, 3, 4, 5, 7, 9, 128, 129})
    for (int64_t n : {1, 5, 6, 7, 13})
      for (int64_t k : {1, 15, 16, 17, 40}) {
        const Vec a = random_input(m * k, 7), b = random_input(n * k, 8), init = random_input(m * n, 9);
        Tensor out = upload(Shape{m, n}, init);
        be().matmul(out, upload(Shape{m, k}, a), upload(Shape{n, k}, b), false, true, 0.5f, 2.0f);
        Vec want = ref_matmul(a, b, m, n, k, false, true);
        for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * init[i];
        EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out)) << m << "x" << n << "x" << k;
      }
}

TEST_P(OpsForward, MatmulFlattensLeadingDimsAndBetaZeroIgnoresGarbage) {
  const int64_t k = 4, n = 3;
  const Vec a = random_input(2 * 3 * k, 4), b = random_input(n * k, 5);
  Tensor out = upload(Shape{2, 3, n}, Vec(2 * 3 * n, NAN));
  be().matmul(out, upload(Shape{2, 3, k}, a), upload(Shape{n, k}, b), false, true);
  EXPECT_CLOSE(download(out), ref_matmul(a, b, 6, n, k, false, true), tol(1e-5, kBf16Out));
}

// Sizes that are no multiple of any tile or vector width, and a row view that starts 3 rows into
// its storage (operand addresses a device library may not assume aligned).
TEST_P(OpsForward, MatmulOddSizesAndRowViews) {
  const int64_t m = 37, n = 45, k = 70;
  const Vec a = random_input((m + 3) * k, 40), b = random_input(n * k, 41);
  Tensor out = upload(Shape{m, n}, Vec(m * n, NAN));
  be().matmul(out, upload(Shape{m + 3, k}, a).rows(3, m + 3), upload(Shape{n, k}, b), false, true);
  EXPECT_CLOSE(download(out), ref_matmul(Vec(a.begin() + 3 * k, a.end()), b, m, n, k, false, true),
               tol(1e-5, kBf16Out));
}

TEST_P(OpsForward, MatmulWithEmptyInnerDimensionScalesOut) {
  const Vec init = random_input(6, 42);
  Tensor out = upload(Shape{2, 3}, init);
  be().matmul(out, zeros(Shape{2, 0}), zeros(Shape{0, 3}), false, false, 1.0f, 0.5f);  // out = 0.5 out
  Vec want = init;
  for (double& x : want) x *= 0.5;
  EXPECT_CLOSE(download(out), want, 1e-7);
  be().matmul(out, zeros(Shape{2, 0}), zeros(Shape{0, 3}), false, false);  // beta 0: out = 0
  EXPECT_EQ(download(out), Vec(6, 0.0));
}

// add, axpy and scale in each dtype they accept (f32 and the compute dtype); add_bias in the
// compute dtype. add also in place (out is a), as the model's residuals use it.
TEST_P(OpsForward, ElementwiseAddAxpyScaleBias) {
  const Vec a = random_input(12, 6), b = random_input(12, 7), bias = random_input(4, 8);
  for (DType dtype : float_dtypes()) {
    Tensor ta = upload_as(dtype, Shape{3, 4}, a), tb = upload_as(dtype, Shape{3, 4}, b);
    Tensor out = upload_as(dtype, Shape{3, 4}, Vec(12, 0.0)), in_place = upload_as(dtype, Shape{3, 4}, a);
    be().add(out, ta, tb);
    be().add(in_place, in_place, tb);
    be().axpy(ta, -2.0f, tb);  // a - 2 b
    be().scale(tb, 3.0f);
    if (dtype == be().compute_dtype()) be().add_bias(in_place, upload(Shape{4}, bias));
    Vec want_add(12), want_in_place(12), want_axpy(12), want_scale(12);
    for (int i = 0; i < 12; ++i) {
      want_add[i] = a[i] + b[i];
      want_in_place[i] = a[i] + b[i] + (dtype == be().compute_dtype() ? bias[i % 4] : 0.0);
      want_axpy[i] = a[i] - 2 * b[i];
      want_scale[i] = 3 * b[i];
    }
    const double t = dtype == DType::kF32 ? 1e-6 : kBf16Out;
    EXPECT_CLOSE(download(out), want_add, t) << dtype_name(dtype);
    EXPECT_CLOSE(download(in_place), want_in_place, t) << dtype_name(dtype);
    EXPECT_CLOSE(download(ta), want_axpy, t) << dtype_name(dtype);
    EXPECT_CLOSE(download(tb), want_scale, t) << dtype_name(dtype);
  }
}

TEST_P(OpsForward, EmbeddingGathersRows) {
  const int64_t vocab = 6, h = 5;
  const Vec table = random_input(vocab * h, 9);
  const std::vector<int32_t> ids = {3, 0, 5, 3};
  Tensor out = zeros(Shape{4, h});
  be().embedding_forward(out, upload(Shape{vocab, h}, table), upload_i32(Shape{4}, ids));
  Vec want;
  for (int32_t id : ids) want.insert(want.end(), table.begin() + id * h, table.begin() + (id + 1) * h);
  EXPECT_EQ(download(out), want);  // a gather is exact
}

// A data-dependent check, made by the backend that can read the ids: the CPU at once, CUDA at the
// next synchronisation point.
TEST_P(OpsForward, EmbeddingIdOutsideTheVocabularyAbortsNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child cannot use the parent's CUDA context
  Tensor out = zeros(Shape{2, 8}), table = upload(Shape{4, 8}, random_input(32, 12));
  Tensor ids = upload_i32(Shape{2}, {1, 4});
  EXPECT_DEATH(
      {
        be().embedding_forward(out, table, ids);
        be().synchronize();
      },
      "embedding_forward.* id .*outside");
}

// A small hidden size and a real one (qwen2-0.5b's 896: several reduction blocks on a device).
TEST_P(OpsForward, RmsNormAndSavedRstd) {
  const int64_t n = 4;
  for (int64_t h : {33, 896}) {
    const Vec x = random_input(n * h, 10, -3, 3), w = random_input(h, 11);
    Tensor out = zeros(Shape{n, h}), rstd = zeros_f32(Shape{n});
    be().rmsnorm_forward(out, rstd, upload(Shape{n, h}, x), upload(Shape{h}, w), 1e-5f);
    Vec want_rstd;
    const Vec want = ref_rmsnorm(x, w, n, h, 1e-5, &want_rstd);
    EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out)) << "h=" << h;
    EXPECT_CLOSE(download(rstd), want_rstd, tol(1e-5, kBf16Stat)) << "h=" << h;
  }
}

TEST_P(OpsForward, RopeMatchesReferenceAndBackwardInverts) {
  const int64_t h = 3, d = 8;
  const std::vector<int32_t> pos = {0, 1, 2, 3, 0, 1, 70, 0};  // restarts, as in packed rows
  const int64_t n = static_cast<int64_t>(pos.size());
  const Vec x = random_input(n * h * d, 12);
  Tensor t = upload(Shape{n, h, d}, x), positions = upload_i32(Shape{n}, pos);
  be().rope_forward(t, positions, 10000.0f);
  EXPECT_CLOSE(download(t), ref_rope(x, pos, h, d, 10000.0), tol(1e-5, kBf16Out));
  be().rope_backward(t, positions, 10000.0f);
  EXPECT_CLOSE(download(t), x, tol(1e-5, kBf16Chain));
  // Position 0 is the identity.
  Tensor one = upload(Shape{1, h, d}, Vec(x.begin(), x.begin() + h * d));
  be().rope_forward(one, upload_i32(Shape{1}, {0}), 500000.0f);
  EXPECT_CLOSE(download(one), Vec(x.begin(), x.begin() + h * d), 1e-7);
}

// The RoPE variants' form: any inverse frequencies (llama3, yarn: model/rope.h), cos and sin
// scaled (YaRN's attention factor); backward is the transpose, so forward then backward scales by s^2.
TEST_P(OpsForward, RopeWithFrequenciesAndScale) {
  const int64_t h = 2, d = 8;
  const std::vector<int32_t> pos = {0, 3, 17, 1, 40};
  const int64_t n = static_cast<int64_t>(pos.size());
  const Vec x = random_input(n * h * d, 13), freqs = {1.0, 0.3, 0.02, 0.0007};
  const float scale = 1.25f;
  Tensor t = upload(Shape{n, h, d}, x), positions = upload_i32(Shape{n}, pos);
  const Tensor inv_freq = from_host(be(), Shape{d / 2}, std::vector<float>(freqs.begin(), freqs.end()));
  be().rope_forward(t, positions, inv_freq, scale);
  EXPECT_CLOSE(download(t), ref_rope_freqs(x, pos, h, d, freqs, scale), tol(1e-5, kBf16Out));
  be().rope_backward(t, positions, inv_freq, scale);
  Vec scaled = x;
  for (double& v : scaled) v *= double{scale} * scale;
  EXPECT_CLOSE(download(t), scaled, tol(1e-5, kBf16Chain));
}

// Packed sequences of unequal lengths (one of length 1), GQA ratio 3.
TEST_P(OpsForward, AttentionPackedGqaMatchesNaive) {
  const std::vector<int32_t> cu = {0, 5, 6, 15, 18};
  const int64_t n = 18, hq = 6, hkv = 2, d = 8;
  const Vec q = random_input(n * hq * d, 13, -2, 2), k = random_input(n * hkv * d, 14, -2, 2),
            v = random_input(n * hkv * d, 15);
  Tensor out = zeros(Shape{n, hq, d}), lse = zeros_f32(Shape{n, hq});
  be().attention_forward(out, lse, upload(Shape{n, hq, d}, q), upload(Shape{n, hkv, d}, k),
                         upload(Shape{n, hkv, d}, v), upload_i32(Shape{5}, cu), 9);
  Vec want_lse;
  const Vec want = ref_attention(q, k, v, cu, hq, hkv, d, &want_lse);
  EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out));
  EXPECT_CLOSE(download(lse), want_lse, tol(1e-5, kBf16AttentionLse));
}

// Sliding window (Gemma's local layers): each row sees its last `window` rows, sequences of
// lengths below, at and above the window.
TEST_P(OpsForward, AttentionSlidingWindowMatchesNaive) {
  const std::vector<int32_t> cu = {0, 2, 5, 14, 30};
  const int64_t n = 30, hq = 4, hkv = 2, d = 8, window = 3;
  const Vec q = random_input(n * hq * d, 41, -2, 2), k = random_input(n * hkv * d, 42, -2, 2),
            v = random_input(n * hkv * d, 43);
  Tensor out = zeros(Shape{n, hq, d}), lse = zeros_f32(Shape{n, hq});
  be().attention_forward(out, lse, upload(Shape{n, hq, d}, q), upload(Shape{n, hkv, d}, k),
                         upload(Shape{n, hkv, d}, v), upload_i32(Shape{5}, cu), 16, window);
  Vec want_lse;
  const Vec want = ref_attention(q, k, v, cu, hq, hkv, d, &want_lse, window);
  EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out));
  EXPECT_CLOSE(download(lse), want_lse, tol(1e-5, kBf16AttentionLse));
}

// Changing every key and value of one sequence changes nothing in the others.
TEST_P(OpsForward, AttentionNoCrossSequenceLeakage) {
  const std::vector<int32_t> cu = {0, 4, 11, 14};
  const int64_t n = 14, hq = 4, hkv = 1, d = 4;
  const Vec q = random_input(n * hq * d, 16), k = random_input(n * hkv * d, 17), v = random_input(n * hkv * d, 18);
  Vec k2 = k, v2 = v;
  for (int64_t t = cu[1]; t < cu[2]; ++t)  // rewrite sequence 1 entirely
    for (int64_t c = 0; c < hkv * d; ++c) {
      k2[t * hkv * d + c] = 5.0 + c;
      v2[t * hkv * d + c] = -7.0;
    }
  auto run = [&](const Vec& kk, const Vec& vv) {
    Tensor out = zeros(Shape{n, hq, d});
    be().attention_forward(out, Tensor(), upload(Shape{n, hq, d}, q), upload(Shape{n, hkv, d}, kk),
                           upload(Shape{n, hkv, d}, vv), upload_i32(Shape{4}, cu), 7);
    return download(out);
  };
  const Vec a = run(k, v), b = run(k2, v2);
  for (int64_t t = 0; t < n; ++t) {
    const bool in_changed = t >= cu[1] && t < cu[2];
    for (int64_t c = 0; c < hq * d; ++c) {
      if (in_changed) continue;
      ASSERT_EQ(a[t * hq * d + c], b[t * hq * d + c]) << "token " << t << " saw another sequence";
    }
  }
}

// A data-dependent check, made by the backend that can read cu_seqlens.
TEST_P(OpsForward, AttentionLongerThanMaxSeqlenAbortsNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child cannot use the parent's CUDA context
  const Shape qs{40, 2, 8};
  Tensor out = zeros(qs), q = upload(qs, random_input(qs.numel(), 34)), cu = upload_i32(Shape{2}, {0, 40});
  EXPECT_DEATH(
      {
        be().attention_forward(out, Tensor(), q, q, q, cu, 16);
        be().synchronize();
      },
      "attention.*max_seqlen");
}

TEST_P(OpsForward, AttentionLongSequenceMatchesNaive) {
  const std::vector<int32_t> cu = {0, 70};
  const int64_t n = 70, hq = 2, hkv = 2, d = 16;
  const Vec q = random_input(n * hq * d, 19, -3, 3), k = random_input(n * hkv * d, 20, -3, 3),
            v = random_input(n * hkv * d, 21);
  Tensor out = zeros(Shape{n, hq, d});
  be().attention_forward(out, Tensor(), upload(Shape{n, hq, d}, q), upload(Shape{n, hkv, d}, k),
                         upload(Shape{n, hkv, d}, v), upload_i32(Shape{2}, cu), 128);
  EXPECT_CLOSE(download(out), ref_attention(q, k, v, cu, hq, hkv, d), tol(1e-5, kBf16Out));
}

// Head size of real models (64), lengths that are not multiples of the kernels' 4 rows or 8 lanes.
TEST_P(OpsForward, AttentionRealHeadSizeOddLengths) {
  const std::vector<int32_t> cu = {0, 37, 45, 46, 113};
  const int64_t n = 113, hq = 4, hkv = 2, d = 64;
  const Vec q = random_input(n * hq * d, 28), k = random_input(n * hkv * d, 29), v = random_input(n * hkv * d, 30);
  Tensor out = zeros(Shape{n, hq, d}), lse = zeros_f32(Shape{n, hq});
  be().attention_forward(out, lse, upload(Shape{n, hq, d}, q), upload(Shape{n, hkv, d}, k),
                         upload(Shape{n, hkv, d}, v), upload_i32(Shape{5}, cu), 67);
  Vec want_lse;
  const Vec want = ref_attention(q, k, v, cu, hq, hkv, d, &want_lse);
  EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out));
  EXPECT_CLOSE(download(lse), want_lse, tol(1e-5, kBf16AttentionLse));
}

// Sequences in a paged cache: `new_rows` of each are queries, the rest already cached.
struct PagedCase {
  std::vector<int32_t> full_cu, new_rows;
  int64_t hq, hkv, d, block, num_blocks;
  std::vector<int32_t> tables;  // (S, max_blocks): scattered, out of order, -1 where unused
};

// The new rows of each sequence over a paged cache equal the same rows of training attention
// over the whole sequence. Small: a decode step (1 row), a prefill chunk after cached tokens
// (5 rows) and a first token (start 0). Real: head dim 64, blocks of 16, a 37-row prefill and a
// decode at position 70 (several key and query tiles on a device).
TEST_P(OpsForward, PagedAttentionMatchesContiguousAttention) {
  const std::vector<PagedCase> cases = {
      {{0, 7, 19, 20}, {1, 5, 1}, 6, 2, 16, 4, 16, {9, 2, -1, -1, 15, 0, 7, -1, 4, -1, -1, -1}},
      {{0, 37, 108}, {37, 1}, 14, 2, 64, 16, 12, {5, 0, 9, -1, -1, 1, 3, 2, 7, 10}}};
  for (const PagedCase& c : cases) {
    const int64_t num_seqs = static_cast<int64_t>(c.new_rows.size()), n_full = c.full_cu.back();
    const int64_t max_blocks = static_cast<int64_t>(c.tables.size()) / num_seqs, slots = c.num_blocks * c.block;
    const int64_t hq = c.hq, hkv = c.hkv, d = c.d;
    const Vec q = random_input(n_full * hq * d, 31), k = random_input(n_full * hkv * d, 32),
              v = random_input(n_full * hkv * d, 33);
    const Vec want_full = ref_attention(q, k, v, c.full_cu, hq, hkv, d);
    Vec kc(slots * hkv * d, 0.0), vc(slots * hkv * d, 0.0), q_new, want;
    std::vector<int32_t> cu_q = {0}, start;
    int64_t max_context = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t len = c.full_cu[s + 1] - c.full_cu[s];
      for (int64_t p = 0; p < len; ++p) {
        const int64_t slot = c.tables[s * max_blocks + p / c.block] * c.block + p % c.block, t = c.full_cu[s] + p;
        std::copy_n(k.begin() + t * hkv * d, hkv * d, kc.begin() + slot * hkv * d);
        std::copy_n(v.begin() + t * hkv * d, hkv * d, vc.begin() + slot * hkv * d);
      }
      start.push_back(static_cast<int32_t>(len - c.new_rows[s]));
      cu_q.push_back(cu_q.back() + c.new_rows[s]);
      max_context = std::max(max_context, len);
      const int64_t first = c.full_cu[s + 1] - c.new_rows[s];
      q_new.insert(q_new.end(), q.begin() + first * hq * d, q.begin() + c.full_cu[s + 1] * hq * d);
      want.insert(want.end(), want_full.begin() + first * hq * d, want_full.begin() + c.full_cu[s + 1] * hq * d);
    }
    const int64_t n = cu_q.back();
    Tensor out = zeros(Shape{n, hq, d});
    be().paged_attention_forward(out, upload(Shape{n, hq, d}, q_new), upload(Shape{slots, hkv, d}, kc),
                                 upload(Shape{slots, hkv, d}, vc), upload_i32(Shape{num_seqs + 1}, cu_q),
                                 upload_i32(Shape{num_seqs}, start), upload_i32(Shape{num_seqs, max_blocks}, c.tables),
                                 c.block, max_context);
    EXPECT_CLOSE(download(out), want, tol(1e-5, kBf16Out)) << "d=" << d << " block=" << c.block;
  }
}

// A tiny case, one whose size is no multiple of a vector width, and one of several parallel
// chunks (the CPU backend's are 4096 elements) with gates far into both tails of the sigmoid.
TEST_P(OpsForward, SwiGlu) {
  for (const Shape shape : {Shape{5, 6}, Shape{7, 143}, Shape{3, 4099}}) {
    const double range = shape.numel() > 4096 ? 40 : 6;
    const Vec g = random_input(shape.numel(), 22, -range, range), u = random_input(shape.numel(), 23);
    Tensor out = zeros(shape);
    be().swiglu_forward(out, upload(shape, g), upload(shape, u));
    EXPECT_CLOSE(download(out), ref_swiglu(g, u), tol(1e-6, kBf16Out)) << shape.str();
  }
}

TEST_P(OpsForward, LogprobEntropyMatchNaiveAndAreShiftStable) {
  const int64_t n = 5, v = 37;
  Vec logits = random_input(n * v, 24, -4, 4);
  for (int64_t c = 0; c < v; ++c) logits[3 * v + c] += 1000.0;  // overflow in a naive exp
  logits = representable(logits);
  const std::vector<int32_t> targets = {0, 36, -1, 17, 5};
  Tensor lp = zeros_f32(Shape{n}), ent = zeros_f32(Shape{n}), lse = zeros_f32(Shape{n});
  be().logprob_forward(lp, ent, lse, upload(Shape{n, v}, logits), upload_i32(Shape{n}, targets));
  Vec want_lp, want_ent, want_lse;
  ref_logprob(logits, targets, v, &want_lp, &want_ent, &want_lse);
  EXPECT_CLOSE(download(lp), want_lp, tol(1e-5, kBf16Stat));
  EXPECT_CLOSE(download(ent), want_ent, tol(1e-5, kBf16Stat));
  EXPECT_CLOSE(download(lse), want_lse, tol(1e-6, kBf16Stat));  // relative to |lse| ~ 1000
  EXPECT_EQ(download(lp)[2], 0.0);  // no target
}

// A real vocabulary's worth of columns (several blocks per row on a device), targets at both ends.
TEST_P(OpsForward, LogprobEntropyOverALargeVocabulary) {
  const int64_t n = 3, v = 5003;
  const Vec logits = random_input(n * v, 43, -12, 12);
  const std::vector<int32_t> targets = {0, 5002, -1};
  Tensor lp = zeros_f32(Shape{n}), ent = zeros_f32(Shape{n}), lse = zeros_f32(Shape{n});
  be().logprob_forward(lp, ent, lse, upload(Shape{n, v}, logits), upload_i32(Shape{n}, targets));
  Vec want_lp, want_ent, want_lse;
  ref_logprob(logits, targets, v, &want_lp, &want_ent, &want_lse);
  EXPECT_CLOSE(download(lp), want_lp, tol(1e-5, kBf16Stat));
  EXPECT_CLOSE(download(ent), want_ent, tol(1e-5, kBf16Stat));
  EXPECT_CLOSE(download(lse), want_lse, tol(1e-5, kBf16Stat));
}

TEST_P(OpsForward, AdamWMatchesScalarFormulaOverThreeSteps) {
  const int64_t n = 17;
  Vec w = random_input(n, 25), m(n, 0.0), vv(n, 0.0);
  Tensor param = upload_f32(Shape{n}, w), mt = zeros_f32(Shape{n}), vt = zeros_f32(Shape{n});
  AdamWParams p{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 1};
  for (int step = 1; step <= 3; ++step) {
    const Vec g = random_input(n, 100 + step);
    p.step = step;
    be().adamw_step(param, upload_f32(Shape{n}, g), mt, vt, p);
    for (int64_t i = 0; i < n; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      vv[i] = 0.95 * vv[i] + 0.05 * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(0.9, step)), vhat = vv[i] / (1 - std::pow(0.95, step));
      w[i] -= 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * w[i]);
    }
  }
  EXPECT_CLOSE(download(param), w, 1e-6);
  EXPECT_CLOSE(download(mt), m, 1e-6);
  EXPECT_CLOSE(download(vt), vv, 1e-6);
}

// In each dtype it accepts; 100003 elements: many partial sums on a device, none a full block.
TEST_P(OpsForward, SumSquaresAndClipScale) {
  const int64_t n = 100003;
  const Vec x = random_input(n, 26, -2, 2);
  double want = 0.0;
  for (double e : x) want += e * e;
  for (DType dtype : float_dtypes()) {
    Tensor t = upload_as(dtype, Shape{n}, x);
    EXPECT_NEAR(be().sum_squares(t), want, 1e-6 * want) << dtype_name(dtype);
    be().scale(t, 0.5f);  // exact: a power of two
    EXPECT_NEAR(be().sum_squares(t), want / 4, 1e-6 * want) << dtype_name(dtype);
  }
}

TEST_P(OpsForward, ConvertF32Bf16RoundTripMatchesHostRounding) {
  const Vec x = random_vec(64, 27, -100, 100);  // not representable: exercises the rounding
  Tensor f = upload_f32(Shape{64}, x), b = be().zeros(Shape{64}, DType::kBF16), back = zeros_f32(Shape{64});
  be().convert(b, f);
  be().convert(back, b);
  const Vec got = download(back);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(got[i], bf16_to_f32(f32_to_bf16(static_cast<float>(x[i])))) << i;
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsForward, ::testing::ValuesIn(backends_under_test()), backend_param_name);

}  // namespace
}  // namespace rlrun::engine::testing
