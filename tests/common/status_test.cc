#include "common/status.h"

#include <gtest/gtest.h>

namespace rlrun {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be positive, got " + std::to_string(x));
  return x;
}

Status use_two(int a, int b, int* sum) {
  RLRUN_ASSIGN_OR_RETURN(int pa, parse_positive(a));
  RLRUN_ASSIGN_OR_RETURN(int pb, parse_positive(b));
  *sum = pa + pb;
  return Status();
}

TEST(Status, OkByDefaultAndCarriesMessage) {
  EXPECT_TRUE(Status().ok());
  Status s = not_found("model.safetensors: no such file");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.with_context("loading checkpoint").message(),
            "loading checkpoint: model.safetensors: no such file");
}

TEST(Status, AssignOrReturnPropagatesFirstError) {
  int sum = 0;
  EXPECT_TRUE(use_two(2, 3, &sum).ok());
  EXPECT_EQ(sum, 5);
  Status s = use_two(2, -1, &sum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x must be positive, got -1");
}

TEST(StatusDeathTest, ValueOfErrorAbortsWithFileLine) {
  Result<int> r = invalid_argument("nope");
  EXPECT_DEATH((void)r.value(), "status.cc:[0-9]+.*nope");
}

}  // namespace
}  // namespace rlrun
