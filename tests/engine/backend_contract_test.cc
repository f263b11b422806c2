// The op contracts of backend.h are checked once, by Backend's public methods (backend.cc), for
// every backend: a call that breaks one aborts naming the op, the tensor's role and the shapes,
// before any backend code runs. A few representative breaches, through the public interface.
#include "tests/engine/op_test_util.h"

namespace rlrun::engine::testing {
namespace {

class BackendContract : public BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // a forked child cannot use the parent's CUDA context
  }
};

TEST_P(BackendContract, MatmulShapesThatDoNotFitNameTheShapes) {
  Tensor out = zeros(Shape{2, 3}), a = zeros(Shape{2, 4}), b = zeros(Shape{5, 3});
  EXPECT_DEATH(be().matmul(out, a, b, false, false),
               "matmul: out [a-z0-9]+\\(2, 3\\) = a [a-z0-9]+\\(2, 4\\) @ b [a-z0-9]+\\(5, 3\\) does not fit");
}

TEST_P(BackendContract, WrongDtypeNamesTheOpAndTheRole) {
  Tensor out = zeros(Shape{2, 3}), a = be().zeros(Shape{2, 4}, DType::kI32), b = zeros(Shape{4, 3});
  EXPECT_DEATH(be().matmul(out, a, b, false, false), "matmul: a is i32\\(2, 4\\), expected");
  Tensor x = zeros(Shape{3, 4}), f32 = zeros_f32(Shape{3}), targets = zeros_f32(Shape{3});  // targets: i32
  EXPECT_DEATH(be().logprob_forward(f32, f32, f32, x, targets), "logprob_forward: targets is f32\\(3\\), expected i32");
}

TEST_P(BackendContract, WrongShapeNamesTheExpectedShape) {
  Tensor out = zeros(Shape{4, 6}), x = zeros(Shape{4, 6}), weight = zeros(Shape{5});
  EXPECT_DEATH(be().rmsnorm_forward(out, Tensor(), x, weight, 1e-5f),
               "rmsnorm_forward: weight is [a-z0-9]+\\(5\\), expected \\(6\\)");
  Tensor emb = zeros(Shape{3, 8}), table = zeros(Shape{10, 8});
  EXPECT_DEATH(be().embedding_forward(emb, table, upload_i32(Shape{2}, {1, 2})),
               "embedding_forward: out is [a-z0-9]+\\(3, 8\\), expected \\(2, 8\\)");
}

TEST_P(BackendContract, AttentionHeadsThatDoNotGroupAbort) {
  Tensor q = zeros(Shape{4, 3, 8}), kv = zeros(Shape{4, 2, 8}), out = zeros(Shape{4, 3, 8});
  EXPECT_DEATH(be().attention_forward(out, Tensor(), q, kv, kv, upload_i32(Shape{2}, {0, 4}), 4),
               "attention_forward: q [a-z0-9]+\\(4, 3, 8\\) does not fit k");
}

TEST_P(BackendContract, UndefinedAndForeignTensorsAbort) {
  Tensor x = zeros(Shape{2, 1, 4});
  EXPECT_DEATH(be().rope_forward(x, Tensor(), 10000.0f), "rope_forward: positions is undefined");
  cpu::CpuBackend other(1);  // a second backend: its tensors are not this one's
  Tensor foreign = other.zeros(Shape{2, 1, 4}, be().compute_dtype());
  EXPECT_DEATH(be().copy(x, foreign), "copy: src [a-z0-9]+\\(2, 1, 4\\) is on cpu, not on this");
}

// Where an op allows aliasing, the output is that input itself or does not overlap it.
TEST_P(BackendContract, AliasingRulesAreChecked) {
  const int64_t n = 4, v = 8;
  Tensor storage = zeros(Shape{n + 1, v});
  Tensor logits = storage.rows(0, n), shifted = storage.rows(1, n + 1), f32 = zeros_f32(Shape{n});
  Tensor targets = upload_i32(Shape{n}, {0, 1, 2, 3});
  EXPECT_DEATH(be().logprob_backward(shifted, logits, targets, f32, f32, f32, Tensor()),
               "logprob_backward: dlogits must be logits itself or not overlap it");
  Tensor gate = zeros(Shape{2, 3}), up = zeros(Shape{2, 3}), dout = zeros(Shape{2, 3});
  EXPECT_DEATH(be().swiglu_backward(up, gate, dout, gate, up), "swiglu_backward: dgate must");
}

TEST_P(BackendContract, AdamwStepCountsFromOne) {
  Tensor p = zeros_f32(Shape{3});
  AdamWParams params;
  params.step = 0;
  EXPECT_DEATH(be().adamw_step(p, zeros_f32(Shape{3}), zeros_f32(Shape{3}), zeros_f32(Shape{3}), params),
               "adamw_step: step must be >= 1, got 0");
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendContract, ::testing::ValuesIn(backends_under_test()), backend_param_name);

}  // namespace
}  // namespace rlrun::engine::testing
