// The bf16 refusals a worker makes before it computes: compute_dtype and base_weights_dtype bf16
// need native bf16 products, and the error names the key, the CPU and what to set instead.
#include "orchestrator/roles/compute_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/cpu/cpu_gemm.h"
#include "tests/common/config_test_util.h"

namespace rlrun::orchestrator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using rlrun::testing::load_text;

TEST(ComputeBackend, Bf16BaseWeightsWithoutNativeBf16ProductsAreRefusedNamingTheKey) {
  Config config = *load_text("base_weights_dtype: bf16\nlora_rank: 8\n");
  const Status refused = check_bf16_products(config, /*native=*/false, "Some CPU has avx2");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), AllOf(HasSubstr("base_weights_dtype: bf16 needs a CPU that multiplies bf16 natively"),
                                       HasSubstr("Some CPU has avx2"), HasSubstr("set base_weights_dtype: fp32")));
  EXPECT_TRUE(check_bf16_products(config, /*native=*/true, "").ok());
  config.base_weights_dtype = ComputeDtype::kFp32;
  EXPECT_TRUE(check_bf16_products(config, /*native=*/false, "").ok());
  config.compute_dtype = ComputeDtype::kBf16;
  EXPECT_THAT(check_bf16_products(config, false, "").message(), HasSubstr("set compute_dtype: fp32"));
}

TEST(ComputeBackend, Bf16BaseWeightsAreFrozenStorageAndBuildOnThisHostWhereItMultipliesBf16) {
  Config config = *load_text("base_weights_dtype: bf16\n");
  EXPECT_EQ(frozen_weight_storage(config), engine::WeightStorage::kBf16Frozen);
  EXPECT_EQ(frozen_weight_storage(*load_text("seed: 1\n")), engine::WeightStorage::kF32);
  auto backend = backend_from_config(config, 1);
  EXPECT_EQ(backend.ok(), engine::cpu::bf16_gemm_native()) << backend.status().to_string();
  if (!engine::cpu::bf16_gemm_native()) {
    EXPECT_THAT(backend.status().message(), HasSubstr("base_weights_dtype: bf16 needs a CPU"));
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
