// compute_backend.cc - a worker's backend from the config (compute_backend.h).
#include "orchestrator/roles/compute_backend.h"

#include <utility>

#include "engine/cpu/cpu_gemm.h"

namespace rlrun::orchestrator {

Status check_bf16_products(const Config& config, bool native, const std::string& cpu) {
  if (config.backend != BackendKind::kCpu || native) return Status();
  for (const auto& [key, value] : {std::pair{"compute_dtype", config.compute_dtype},
                                   std::pair{"base_weights_dtype", config.base_weights_dtype}}) {
    if (value == ComputeDtype::kBf16)
      return invalid_argument(str(key, ": bf16 needs a CPU that multiplies bf16 natively (AVX512_BF16 or AMX); ", cpu,
                                  ": set ", key, ": fp32"));
  }
  return Status();
}

Status check_compute_dtype(const Config& config) {
  if (config.backend != BackendKind::kCpu) return Status();
  if (config.compute_dtype != ComputeDtype::kBf16 && config.base_weights_dtype != ComputeDtype::kBf16) return Status();
  const engine::cpu::CpuFeatures& cpu = engine::cpu::cpu_features();
  return check_bf16_products(config, engine::cpu::bf16_gemm_native(),
                             str(cpu.model_name.empty() ? std::string("this CPU") : cpu.model_name, " has ",
                                 cpu.flags(), " and ", engine::cpu::gemm_library().name, " runs ",
                                 engine::cpu::gemm_library().isa, " kernels here"));
}

bool bf16_frozen_weights(const Config& config) {
  return config.backend == BackendKind::kCpu &&
         (config.base_weights_dtype == ComputeDtype::kBf16 || config.compute_dtype == ComputeDtype::kBf16);
}

engine::WeightStorage frozen_weight_storage(const Config& config) {
  return bf16_frozen_weights(config) ? engine::WeightStorage::kBf16Frozen : engine::WeightStorage::kF32;
}

engine::WeightStorage trained_weight_storage(const Config& config) {
  return config.backend == BackendKind::kCpu && config.compute_dtype == ComputeDtype::kBf16
             ? engine::WeightStorage::kBf16Cache
             : engine::WeightStorage::kF32;
}

Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads) {
  RLRUN_RETURN_IF_ERROR(check_compute_dtype(config));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                         engine::create_backend(enum_name(config.backend), threads));
  if (config.backend == BackendKind::kCpu && !backend->set_matmul_bf16(config.compute_dtype == ComputeDtype::kBf16))
    return internal_error("the CPU backend refused compute_dtype: bf16 that the CPU check allowed");
  return backend;
}

}  // namespace rlrun::orchestrator
