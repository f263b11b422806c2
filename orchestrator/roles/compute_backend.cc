// compute_backend.cc - a worker's backend from the config (compute_backend.h).
#include "orchestrator/roles/compute_backend.h"

#include "common/observe/log.h"
#include "engine/cpu/cpu_gemm.h"

namespace rlrun::orchestrator {

ComputeDtype pick_compute_dtype(ComputeDtypeChoice asked, bool native) {
  switch (asked) {
    case ComputeDtypeChoice::kFp32: return ComputeDtype::kFp32;
    case ComputeDtypeChoice::kBf16: return ComputeDtype::kBf16;
    case ComputeDtypeChoice::kAuto: break;
  }
  return native ? ComputeDtype::kBf16 : ComputeDtype::kFp32;
}

bool cpu_bf16_products(const Config& config) {
  return config.backend == BackendKind::kCpu &&
         pick_compute_dtype(config.compute_dtype, engine::cpu::bf16_gemm_native()) == ComputeDtype::kBf16;
}

std::string describe_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu) return "compute_dtype: bf16 (backend cuda)";
  const std::string chosen = cpu_bf16_products(config) ? "compute_dtype: bf16" : "compute_dtype: fp32";
  if (config.compute_dtype != ComputeDtypeChoice::kAuto) return chosen;
  return str(chosen, engine::cpu::bf16_gemm_native() ? " (auto: bf16 products are native here: "
                                                     : " (auto: no native bf16 products here: ",
             engine::cpu::describe_compute(nullptr), ")");
}

Status check_bf16_products(const Config& config, bool native, const std::string& cpu) {
  if (config.backend != BackendKind::kCpu || native) return Status();
  struct Asked {
    const char* key;
    bool bf16;
    const char* instead;
  };
  for (const Asked& a : {Asked{"compute_dtype", config.compute_dtype == ComputeDtypeChoice::kBf16, "fp32 or auto"},
                         Asked{"base_weights_dtype", config.base_weights_dtype == ComputeDtype::kBf16, "fp32"}}) {
    if (a.bf16)
      return invalid_argument(str(a.key, ": bf16 needs a CPU that multiplies bf16 natively (AVX512_BF16 or AMX); ",
                                  cpu, ": set ", a.key, ": ", a.instead));
  }
  return Status();
}

Status check_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu) return Status();
  if (config.compute_dtype != ComputeDtypeChoice::kBf16 && config.base_weights_dtype != ComputeDtype::kBf16)
    return Status();
  return check_bf16_products(config, engine::cpu::bf16_gemm_native(), engine::cpu::describe_compute(nullptr));
}

bool bf16_frozen_weights(const Config& config) {
  return config.backend == BackendKind::kCpu &&
         (config.base_weights_dtype == ComputeDtype::kBf16 || cpu_bf16_products(config));
}

engine::WeightStorage frozen_weight_storage(const Config& config) {
  return bf16_frozen_weights(config) ? engine::WeightStorage::kBf16Frozen : engine::WeightStorage::kF32;
}

engine::WeightStorage trained_weight_storage(const Config& config) {
  return cpu_bf16_products(config) ? engine::WeightStorage::kBf16Cache : engine::WeightStorage::kF32;
}

Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads) {
  RLRUN_RETURN_IF_ERROR(check_compute_dtype(config));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                         engine::create_backend(enum_name(config.backend), threads));
  if (config.backend == BackendKind::kCpu && !backend->set_matmul_bf16(cpu_bf16_products(config)))
    return internal_error("the CPU backend refused compute_dtype: bf16 that the CPU check allowed");
  log::info(describe_compute_dtype(config));
  return backend;
}

}  // namespace rlrun::orchestrator
