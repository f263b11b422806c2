// The bf16 refusals a worker makes before it computes: compute_dtype and base_weights_dtype bf16
// need native bf16 products, and the error names the key, the CPU and what to set instead.
#include "orchestrator/roles/compute_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
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
  config.compute_dtype = ComputeDtypeChoice::kBf16;
  EXPECT_THAT(check_bf16_products(config, false, "").message(), HasSubstr("set compute_dtype: fp32"));
}

TEST(ComputeBackend, Bf16BaseWeightsAreFrozenStorageAndBuildOnThisHostWhereItMultipliesBf16) {
  Config config = *load_text("base_weights_dtype: bf16\n");
  EXPECT_EQ(frozen_weight_storage(config), engine::WeightStorage::kBf16Frozen);
  EXPECT_EQ(frozen_weight_storage(*load_text("compute_dtype: fp32\n")), engine::WeightStorage::kF32);
  auto backend = backend_from_config(config, 1);
  EXPECT_EQ(backend.ok(), engine::cpu::bf16_gemm_native()) << backend.status().to_string();
  if (!engine::cpu::bf16_gemm_native()) {
    EXPECT_THAT(backend.status().message(), HasSubstr("base_weights_dtype: bf16 needs a CPU"));
  }
}

// compute_dtype: auto is bf16 only where the CPU multiplies bf16 natively; fp32 and bf16 are what
// they say, whatever the host.
TEST(ComputeBackend, AutoComputeDtypeIsBf16OnNativeBf16CpusOnly) {
  EXPECT_EQ(pick_compute_dtype(ComputeDtypeChoice::kAuto, true), ComputeDtype::kBf16);
  EXPECT_EQ(pick_compute_dtype(ComputeDtypeChoice::kAuto, false), ComputeDtype::kFp32);
  EXPECT_EQ(pick_compute_dtype(ComputeDtypeChoice::kFp32, true), ComputeDtype::kFp32);
  EXPECT_EQ(pick_compute_dtype(ComputeDtypeChoice::kBf16, false), ComputeDtype::kBf16);
}

// On this host, the default (auto): bf16 where the CPU multiplies bf16 natively (the trainer's bf16
// copy, the rollout's bf16 matrices, the backend's bf16 products), fp32 elsewhere, and never
// refused; compute_dtype: fp32 pins fp32.
TEST(ComputeBackend, AutoComputeDtypeOnThisHostFollowsItsCpu) {
  const Config config = *load_text("seed: 1\n");
  const bool native = engine::cpu::bf16_gemm_native();
  EXPECT_EQ(config.compute_dtype, ComputeDtypeChoice::kAuto) << "auto is the default";
  EXPECT_EQ(cpu_bf16_products(config), native);
  EXPECT_EQ(trained_weight_storage(config), native ? engine::WeightStorage::kBf16Cache : engine::WeightStorage::kF32);
  EXPECT_EQ(frozen_weight_storage(config), native ? engine::WeightStorage::kBf16Frozen : engine::WeightStorage::kF32);
  EXPECT_THAT(describe_compute_dtype(config),
              HasSubstr(native ? "compute_dtype: bf16 (auto: bf16 products are native here: "
                     : "compute_dtype: fp32 (auto: no native bf16 products here: "));
  auto backend = backend_from_config(config, 1);
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  EXPECT_EQ(dynamic_cast<engine::cpu::CpuBackend&>(**backend).matmul_bf16(), native);
  const Config pinned = *load_text("compute_dtype: fp32\n");
  EXPECT_FALSE(cpu_bf16_products(pinned));
  EXPECT_EQ(trained_weight_storage(pinned), engine::WeightStorage::kF32);
  EXPECT_EQ(frozen_weight_storage(pinned), engine::WeightStorage::kF32);
  EXPECT_EQ(describe_compute_dtype(pinned), "compute_dtype: fp32");
}

}  // namespace
}  // namespace rlrun::orchestrator
